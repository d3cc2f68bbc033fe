package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench"
	"github.com/canopy-db/canopy/internal/bench/kvbench"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/spf13/cobra"
)

type benchKVOptions struct {
	host         string
	concurrency  []int
	readPercents []int
	fsync        []string
	nodes        int
	ranges       int
	out          string
	cpuProfile   string
	kv           kvbench.Options
}

func init() {
	var o benchKVOptions
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "Single-key Put/Get throughput and p50/p99 latency against concurrency",
		Long: `Runs single-key Puts and Gets outside transactions with N concurrent clients
(goroutines sharing one client), one run per workload (--read-percent) and
concurrency. Every run is bounded by --duration and by --ops-max. Prints a
table, writes <out>.csv and <out>.png, and states the machine.

Without --host it starts a 3-node cluster in this process, on loopback, in a
temporary directory; --fsync on,off then starts two clusters, one that syncs
every Raft write and one that does not, and runs each workload and
concurrency on one right after the other (figures comparable within the
one run).`,
		Example: `  canopy bench kv --concurrency 1,4,16,64 --value-bytes 256 --duration 10s
  canopy bench kv --host 127.0.0.1:26257 --read-percent 50 --out ""`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchKV(ctx, o, strings.Join(os.Args, " "))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.host, "host", "", "comma-separated addresses of a running cluster (default: start a 3-node cluster in this process)")
	f.IntSliceVar(&o.concurrency, "concurrency", []int{1, 4, 16, 64}, "concurrent clients; one run per value")
	f.IntSliceVar(&o.readPercents, "read-percent", []int{0, 100, 50}, "percent of operations that are Gets; one workload per value")
	f.IntVar(&o.kv.ValueBytes, "value-bytes", 256, "bytes per value")
	f.IntVar(&o.kv.Keys, "keys", 10000, "keys in the keyspace (all written once before the runs)")
	f.DurationVar(&o.kv.Duration, "duration", 10*time.Second, "measured time of each run (at most)")
	f.Int64Var(&o.kv.OpsMax, "ops-max", 1_000_000, "operations of each run (at most)")
	f.DurationVar(&o.kv.Warmup, "warmup", time.Second, "uncounted warm-up at the start of each run")
	f.StringSliceVar(&o.fsync, "fsync", []string{"on"}, "in-process cluster only: on, off, or on,off to compare in one run (off is unsafe: benchmarks only)")
	f.IntVar(&o.nodes, "nodes", 3, "in-process cluster only: nodes")
	f.IntVar(&o.ranges, "initial-ranges", 6, "in-process cluster only: user ranges to pre-split into")
	f.StringVar(&o.out, "out", "docs/bench/kv", "prefix of the CSV and PNG files (empty: write none)")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a pprof CPU profile of the runs (not of start-up and loading) to this file")
	benchCmd.AddCommand(cmd)
}

func runBenchKV(ctx context.Context, o benchKVOptions, command string) error {
	o.kv.EnsureDefaults()
	if err := o.kv.Validate(); err != nil {
		return err
	}
	for _, c := range o.concurrency {
		if c < 1 || c > kvbench.ConcurrencyMax {
			return fmt.Errorf("--concurrency %d not in [1, %d]", c, kvbench.ConcurrencyMax)
		}
	}
	for _, p := range o.readPercents {
		if p < 0 || p > 100 {
			return fmt.Errorf("--read-percent %d not in [0, 100]", p)
		}
	}
	for _, s := range o.fsync {
		if s != "on" && s != "off" {
			return fmt.Errorf("--fsync %q: want on or off", s)
		}
	}
	if o.host != "" && (len(o.fsync) != 1 || o.fsync[0] != "on") {
		return fmt.Errorf("--fsync applies to the in-process cluster only; a cluster at --host syncs as it was started")
	}
	if len(o.concurrency) == 0 || len(o.readPercents) == 0 || len(o.fsync) == 0 {
		return fmt.Errorf("--concurrency, --read-percent and --fsync need at least one value")
	}

	m := bench.ThisMachine()
	fmt.Printf("canopy bench kv\n  command:  %s\n  machine:  %s\n", command, m)
	fmt.Printf("  workload: %d keys, %d-byte values, runs of at most %v and %d ops after a %v warm-up, one client.DB shared by the workers\n",
		o.kv.Keys, o.kv.ValueBytes, o.kv.Duration, o.kv.OpsMax, o.kv.Warmup)

	// Every cluster is started and loaded first; then each workload and
	// concurrency runs on one cluster after the other, so that a
	// comparison between clusters (fsync on and off) is taken minutes
	// apart at most, under the same background load, rather than in two
	// halves of the run.
	var targets []benchTarget
	defer func() {
		for _, tg := range targets {
			tg.close()
		}
	}()
	for _, fs := range o.fsync {
		label := "remote"
		if o.host == "" {
			label = map[string]string{"on": "fsync", "off": "no fsync"}[fs]
		}
		tg, err := openBenchTarget(ctx, o, fs == "off", label)
		if err != nil {
			return err
		}
		targets = append(targets, tg)
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Println()
	fmt.Println(kvbench.TableHeader)
	kv := o.kv
	kv.Progress = os.Stderr
	var rows []kvbench.Row
	for _, rp := range o.readPercents {
		for _, c := range o.concurrency {
			for _, tg := range targets {
				r, err := kvbench.Run(ctx, tg.db, kv, rp, c)
				if err != nil {
					return err
				}
				row := kvbench.Row{Cluster: tg.label, ValueBytes: o.kv.ValueBytes, Keys: o.kv.Keys, Result: r}
				kvbench.WriteTableRow(os.Stdout, row)
				rows = append(rows, row)
			}
		}
	}
	for _, r := range rows {
		if r.Errors > 0 || r.NotFound > 0 {
			fmt.Printf("  %s c=%d: %d errors (first: %s), %d gets found nothing\n",
				kvbench.WorkloadName(r.ReadPercent), r.Concurrency, r.Errors, r.FirstError, r.NotFound)
		}
	}
	if end := bench.ThisMachine().LoadAverage; end != "" {
		fmt.Printf("load average at end: %s (at start: %s; %d CPUs)\n", end, m.LoadAverage, m.CPUs)
	}
	if o.out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	if err := kvbench.WriteCSV(o.out+".csv", rows, m); err != nil {
		return err
	}
	title := fmt.Sprintf("canopy bench kv: %d-byte values, %d keys", o.kv.ValueBytes, o.kv.Keys)
	if o.host == "" {
		title += fmt.Sprintf(", %d nodes in one process on loopback", o.nodes)
	}
	if err := kvbench.WritePlot(o.out+".png", title, rows, m); err != nil {
		return err
	}
	fmt.Printf("\nwrote %s.csv and %s.png\n", o.out, o.out)
	return nil
}

// benchTarget is a loaded cluster and a client of it.
type benchTarget struct {
	label   string
	db      *client.DB
	cluster *testcluster.Cluster // nil for --host
}

func (tg benchTarget) close() {
	_ = tg.db.Close()
	if tg.cluster != nil {
		tg.cluster.Close()
	}
}

// openBenchTarget connects to the cluster at --host, or starts a new
// in-process one, and writes every key once.
func openBenchTarget(ctx context.Context, o benchKVOptions, noSync bool, label string) (benchTarget, error) {
	tg := benchTarget{label: label}
	addrs := splitHosts(o.host)
	if o.host == "" {
		fmt.Printf("[%s] starting a %d-node cluster in this process (%d user ranges, Raft tick 100ms)...\n", label, o.nodes, o.ranges)
		c, err := testcluster.Start(testcluster.Options{
			Nodes: o.nodes, InitialRanges: o.ranges, TickInterval: 100 * time.Millisecond,
			Storage: storage.Options{NoSync: noSync},
			Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		})
		if err != nil {
			return tg, err
		}
		tg.cluster, addrs = c, c.Addrs()
	}
	db, err := client.Open(ctx, addrs)
	if err != nil {
		if tg.cluster != nil {
			tg.cluster.Close()
		}
		return tg, err
	}
	tg.db = db
	fmt.Printf("[%s] loading %d keys...\n", label, o.kv.Keys)
	start := time.Now()
	if err := kvbench.Load(ctx, db, o.kv); err != nil {
		tg.close()
		return tg, err
	}
	fmt.Printf("[%s] loaded in %.1fs\n", label, time.Since(start).Seconds())
	return tg, nil
}

func splitHosts(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
