package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/canopy-db/canopy/internal/nemesis"
	"github.com/spf13/cobra"
)

// `canopy nemesis`: a cluster of real processes of this binary, a workload
// and a fault schedule; then a heal, the history checkers and a verdict
// table (internal/nemesis).
func init() {
	var cfg nemesis.Config
	var kinds, dir string
	var keep bool
	cmd := &cobra.Command{
		Use:   "nemesis",
		Short: "Run a cluster of local processes under injected faults and check the history",
		Long: `Start --nodes processes of this binary (with --enable-fault-injection) on
loopback ports, run --workload from --workers clients, and inject --faults in
turn: each lasts --fault-duration, then --interval of quiet. After --duration
every fault is healed, the clients stop, and the history is checked:
list-append (serializability and no lost acknowledged append), bank (the
total holds) or register (linearizability). Prints progress lines, then a
verdict table; exit status 1 on any violation or when no verdict was reached.`,
		Example: `  canopy nemesis --duration 30m --workload list-append --faults all`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if cfg.Kinds, err = nemesis.ParseKinds(kinds); err != nil {
				return usageErrorf("--faults: %v", err)
			}
			if cfg.Binary, err = os.Executable(); err != nil {
				return err
			}
			if dir == "" {
				if dir, err = os.MkdirTemp("", "canopy-nemesis-"); err != nil {
					return err
				}
				if !keep {
					defer os.RemoveAll(dir)
				}
			} else if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if cfg.Dir, err = filepath.Abs(dir); err != nil {
				return err
			}
			if cfg.Seed == 0 {
				cfg.Seed = uint64(time.Now().UnixNano())
			}
			cfg.Progress = cmd.OutOrStdout()
			rep, err := nemesis.Run(cmd.Context(), cfg)
			if rep != nil {
				fmt.Fprintln(cmd.OutOrStdout())
				rep.Print(cmd.OutOrStdout())
			}
			if err != nil {
				return fmt.Errorf("nemesis: %w (node logs in %s)", err, cfg.Dir)
			}
			if !rep.OK() {
				return fmt.Errorf("nemesis: violations found (seed %d, node logs in %s)", cfg.Seed, cfg.Dir)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Nodes, "nodes", 3, "number of node processes")
	f.StringVar(&cfg.Workload, "workload", "list-append", "list-append, bank or register")
	f.StringVar(&kinds, "faults", "all", "comma-separated fault kinds: partition, asymmetric, oracle, delay, kill, pause, skew, disk-stall, sync-error, lost-reply, client-cut, membership (all: every one)")
	f.DurationVar(&cfg.Duration, "duration", time.Minute, "how long to inject faults")
	f.DurationVar(&cfg.Interval, "interval", 5*time.Second, "quiet time between a heal and the next fault")
	f.DurationVar(&cfg.FaultDuration, "fault-duration", 5*time.Second, "how long each fault lasts")
	f.IntVar(&cfg.Workers, "workers", 4, "concurrent clients")
	f.DurationVar(&cfg.OpTimeout, "op-timeout", 10*time.Second, "bound of one operation")
	f.Uint64Var(&cfg.Seed, "seed", 0, "seed of the fault targets and operations (0: from the clock)")
	f.DurationVar(&cfg.ProgressEvery, "progress", 10*time.Second, "interval of the progress lines")
	f.StringVar(&dir, "dir", "", "directory for the nodes' stores and logs (default: a temporary one, removed after)")
	f.BoolVar(&keep, "keep", false, "keep the temporary directory")
	f.StringVar(&cfg.CommitProtocol, "commit-protocol", "", "the cluster's commit protocol (canopy init --commit-protocol; default: default)")
	f.StringSliceVar(&cfg.StartArgs, "start-arg", []string{"--raft-tick=50ms"}, "extra flag of every `canopy start` (repeatable)")
	rootCmd.AddCommand(cmd)
}
