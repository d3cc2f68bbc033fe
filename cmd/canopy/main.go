// Command canopy is Canopy's single binary: node, admin, client, demo and
// benchmarks. Subcommands live one per file and register themselves on the
// parent commands declared here.
package main

import (
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

var rootCmd = &cobra.Command{
	Use:   "canopy",
	Short: "Canopy: a distributed, transactional, multi-version key-value store",
	Long: `Canopy: a distributed, transactional, multi-version key-value store.

Commands that talk to a running cluster take --host (env CANOPY_HOST),
--timeout (env CANOPY_TIMEOUT) and --dial-timeout (env CANOPY_DIAL_TIMEOUT),
and exactly one of --certs-dir (env CANOPY_CERTS_DIR; with --user, env
CANOPY_USER, default root) and --insecure (env CANOPY_INSECURE), as start does.

` + exitCodesHelp,
	SilenceUsage:  true,
	SilenceErrors: true,
	PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
		if err := applyEnv(cmd.Flags()); err != nil {
			return err
		}
		return setupLogging(cmd)
	},
}

// benchCmd groups the benchmarks; each benchmark file adds itself.
var benchCmd = &cobra.Command{
	Use:   "bench",
	Short: "Run a benchmark: prints a table, writes a CSV and a PNG plot",
}

// adminCmd groups cluster administration commands.
var adminCmd = &cobra.Command{
	Use:   "admin",
	Short: "Administer a cluster (split ranges)",
}

func init() {
	rootCmd.AddCommand(benchCmd, adminCmd)
	rootCmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &usageError{msg: err.Error()}
	})
}

// run executes the command line args and returns the exit status. The
// context given to commands ends at the first SIGINT or SIGTERM (a second
// one kills the process), so that commands such as demo clean up.
func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // the next signal gets the default behaviour: exit at once
	}()
	rootCmd.SetArgs(args)
	wrapArgs(rootCmd)
	groupsRefuseUnknown(rootCmd)
	cmd, err := rootCmd.ExecuteContextC(ctx)
	if err != nil && isCobraUsageError(err) {
		err = &usageError{msg: err.Error()}
	}
	if err != nil {
		return reportError(os.Stderr, cmd, err)
	}
	return ExitOK
}

// groupsRefuseUnknown makes every command that only groups others (kv,
// admin, bench, debug) refuse an unknown subcommand with a usage error;
// cobra would print the group's help and exit 0. Alone, a group prints its
// help.
func groupsRefuseUnknown(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		groupsRefuseUnknown(c)
	}
	if cmd == rootCmd || cmd.Runnable() || !cmd.HasSubCommands() {
		return
	}
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErrorf("unknown command %q for %q", args[0], c.CommandPath())
		}
		return c.Help()
	}
}

// isCobraUsageError tells cobra's own errors about the command line (it
// returns them untyped) from the command's.
func isCobraUsageError(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.HasPrefix(s, "required flag") ||
		strings.HasPrefix(s, "unknown flag") || strings.HasPrefix(s, "unknown shorthand flag")
}

func main() {
	os.Exit(run(os.Args[1:]))
}
