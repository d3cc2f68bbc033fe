package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/canopy-db/canopy/internal/bench"
	"github.com/canopy-db/canopy/internal/bench/kvbench"
	"github.com/spf13/cobra"
)

type benchKVOptions struct {
	benchClusterOptions
	readPercents []int
}

func init() {
	var o benchKVOptions
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "Single-key Put/Get throughput and p50/p99 latency against concurrency (Canopy or etcd)",
		Long: `Runs single-key Puts and Gets outside transactions with N concurrent clients
(goroutines sharing one client), one run per workload (--read-percent) and
concurrency. Every run is bounded by --duration and by --ops-max. Prints a
table, writes <out>.csv and <out>.png, and states the machine.

Without --host it starts a 3-node Canopy cluster in this process, on
loopback, in a temporary directory; --fsync on,off then starts two
clusters, one that syncs every Raft write and one that does not, and runs
each workload and concurrency on one right after the other (figures
comparable within the one run).

--target etcd drives a running etcd cluster at --endpoints instead, through
etcd's Go client: Put, and linearizable Get. --pids names the processes of
a running cluster (Canopy's or etcd's): the server cpu us/op column is
their CPU time per operation (scripts/bench-vs-etcd.sh uses it).`,
		Example: `  canopy bench kv --concurrency 1,4,16,64 --value-bytes 256 --duration 10s
  canopy bench kv --host 127.0.0.1:26257 --read-percent 50 --out ""
  canopy bench kv --target etcd --endpoints 127.0.0.1:2379 --read-percent 0,100`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchKV(ctx, o, strings.Join(os.Args, " "))
		},
	}
	f := cmd.Flags()
	o.register(f, "docs/bench/kv")
	f.IntSliceVar(&o.readPercents, "read-percent", []int{0, 100, 50}, "percent of operations that are Gets; one workload per value")
	benchCmd.AddCommand(cmd)
}

func runBenchKV(ctx context.Context, o benchKVOptions, command string) error {
	if err := o.validate(); err != nil {
		return err
	}
	if len(o.readPercents) == 0 {
		return fmt.Errorf("--read-percent needs at least one value")
	}
	for _, p := range o.readPercents {
		if p < 0 || p > 100 {
			return fmt.Errorf("--read-percent %d not in [0, 100]", p)
		}
	}

	m := bench.ThisMachine()
	printBenchHeader("kv", command, m, o.benchClusterOptions, "one client shared by the workers")

	// Every cluster is started and loaded first; then each workload and
	// concurrency runs on one cluster after the other, so that a
	// comparison between clusters (fsync on and off) is taken minutes
	// apart at most, under the same background load, rather than in two
	// halves of the run.
	targets, err := openBenchTargets(ctx, o.benchClusterOptions, func(ctx context.Context, kv kvbench.KV) error {
		return kvbench.Load(ctx, kv, o.kv)
	})
	if err != nil {
		return err
	}
	defer closeTargets(targets)
	if o.loadOnly {
		return nil
	}
	// Points in the order workload, then concurrency.
	n := len(o.concurrency)
	rows, err := runBenchPoints(o.benchClusterOptions, targets, len(o.readPercents)*n, func(tg benchTarget, p int, kv kvbench.Options) (kvbench.Result, error) {
		return kvbench.Run(ctx, tg.kv, kv, o.readPercents[p/n], o.concurrency[p%n])
	})
	if err != nil {
		return err
	}
	return writeBenchOutputs(o.benchClusterOptions, rows, m,
		fmt.Sprintf("canopy bench kv (%s): %d-byte values, %d keys", o.target, o.kv.ValueBytes, o.kv.Keys))
}
