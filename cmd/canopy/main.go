// Command canopy is Canopy's single binary: node, admin, client, demo and
// benchmarks. Subcommands live one per file and register themselves on the
// parent commands declared here.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

var rootCmd = &cobra.Command{
	Use:           "canopy",
	Short:         "Canopy: a distributed, transactional, multi-version key-value store",
	SilenceUsage:  true,
	SilenceErrors: true,
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
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
