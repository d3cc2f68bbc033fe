package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench"
	"github.com/canopy-db/canopy/internal/bench/etcdbench"
	"github.com/canopy-db/canopy/internal/bench/kvbench"
	"github.com/canopy-db/canopy/internal/bench/txnbench"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/spf13/pflag"
)

// benchClusterOptions are the flags `canopy bench kv` and `canopy bench
// txn` share: which system to drive, the keyspace and values, the bounds
// of every run, and the output files.
type benchClusterOptions struct {
	target      string // "canopy" or "etcd"
	label       string // --label: the cluster column's value ("" default)
	host        string
	endpoints   string
	pids        []int
	concurrency []int
	fsync       []string
	nodes       int
	ranges      int
	skipLoad    bool
	loadOnly    bool
	out         string
	plot        bool
	cpuProfile  string
	kv          kvbench.Options
}

// The benchmarks that drive a running cluster (--host) connect with the
// security flags: --certs-dir and --user, or --insecure.
func init() { addSecurityFlags(benchCmd, true) } // conn.go

func (o *benchClusterOptions) register(f *pflag.FlagSet, outDefault string) {
	f.StringVar(&o.target, "target", "canopy", "system to drive: canopy or etcd (etcd needs --endpoints)")
	f.StringVar(&o.label, "label", "", "name of the cluster in the table and CSV (default: canopy, etcd, or fsync / no fsync in this process); e.g. canopy-etcd for --target etcd at Canopy's nodes, which serve etcd's API")
	f.StringVar(&o.host, "host", "", "canopy: comma-separated addresses of a running cluster (default: start a 3-node cluster in this process)")
	f.StringVar(&o.endpoints, "endpoints", "", "etcd: comma-separated client addresses (host:port) of a running etcd cluster")
	f.IntSliceVar(&o.pids, "pids", nil, "process ids of the cluster's server processes (external cluster): each run measures their CPU time (/proc/<pid>/stat) into the server cpu us/op column")
	f.IntSliceVar(&o.concurrency, "concurrency", []int{1, 4, 16, 64}, "concurrent clients; one run per value")
	f.IntVar(&o.kv.ValueBytes, "value-bytes", 256, "bytes per value")
	f.IntVar(&o.kv.Keys, "keys", 10000, "keys in the keyspace (all written once before the runs)")
	f.DurationVar(&o.kv.Duration, "duration", 10*time.Second, "measured time of each run (at most)")
	f.Int64Var(&o.kv.OpsMax, "ops-max", 1_000_000, "operations of each run (at most)")
	f.DurationVar(&o.kv.Warmup, "warmup", time.Second, "uncounted warm-up at the start of each run")
	f.StringSliceVar(&o.fsync, "fsync", []string{"on"}, "in-process cluster only: on, off, or on,off to compare in one run (off is unsafe: benchmarks only)")
	f.IntVar(&o.nodes, "nodes", 3, "in-process cluster only: nodes")
	f.IntVar(&o.ranges, "initial-ranges", 6, "in-process cluster only: user ranges to pre-split into")
	f.BoolVar(&o.skipLoad, "skip-load", false, "do not write the keys first: an earlier run (say, with --load-only) wrote them to the same cluster")
	f.BoolVar(&o.loadOnly, "load-only", false, "write the keys and exit without running")
	f.StringVar(&o.out, "out", outDefault, "prefix of the CSV and PNG files (empty: write none)")
	f.BoolVar(&o.plot, "plot", true, "write <out>.png beside <out>.csv")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a pprof CPU profile of the runs (not of start-up and loading) to this file")
}

func (o *benchClusterOptions) validate() error {
	o.kv.EnsureDefaults()
	o.kv.ServerPIDs = o.pids
	if err := o.kv.Validate(); err != nil {
		return err
	}
	if len(o.concurrency) == 0 || len(o.fsync) == 0 {
		return fmt.Errorf("--concurrency and --fsync need at least one value")
	}
	for _, c := range o.concurrency {
		if c < 1 || c > kvbench.ConcurrencyMax {
			return fmt.Errorf("--concurrency %d not in [1, %d]", c, kvbench.ConcurrencyMax)
		}
	}
	for _, s := range o.fsync {
		if s != "on" && s != "off" {
			return fmt.Errorf("--fsync %q: want on or off", s)
		}
	}
	if o.skipLoad && o.loadOnly {
		return fmt.Errorf("--skip-load and --load-only contradict each other")
	}
	inProcess := o.target == "canopy" && o.host == ""
	switch o.target {
	case "canopy":
		if o.endpoints != "" {
			return fmt.Errorf("--endpoints is for --target etcd; a Canopy cluster is given with --host")
		}
	case "etcd":
		if o.endpoints == "" {
			return fmt.Errorf("--target etcd needs --endpoints")
		}
		if o.host != "" {
			return fmt.Errorf("--host is for --target canopy; an etcd cluster is given with --endpoints")
		}
	default:
		return fmt.Errorf("--target %q: want canopy or etcd", o.target)
	}
	if !inProcess && (len(o.fsync) != 1 || o.fsync[0] != "on") {
		return fmt.Errorf("--fsync applies to the in-process cluster only; a running cluster syncs as it was started")
	}
	if o.label != "" && len(o.fsync) > 1 {
		return fmt.Errorf("--label names one cluster; --fsync on,off runs two")
	}
	if inProcess && len(o.pids) > 0 {
		return fmt.Errorf("--pids measures an external cluster; the in-process cluster's CPU is the cpu %% column")
	}
	if inProcess && (o.skipLoad || o.loadOnly) {
		return fmt.Errorf("--skip-load and --load-only need a running cluster (--host or --endpoints): the in-process one starts empty")
	}
	return nil
}

// benchTarget is a loaded cluster and a client of it.
type benchTarget struct {
	// label names the cluster in tables: "fsync" or "no fsync" (in this
	// process), "canopy" (--host) or "etcd".
	label string
	kv    kvbench.KV
	txn   txnbench.Store
	// closeFn closes the client, and stops the cluster if it runs here.
	closeFn func()
	// tls is the client's TLS configuration (--host with --certs-dir;
	// nil for a cluster in this process, which runs insecure).
	tls *tls.Config
}

func (tg benchTarget) close() {
	if tg.closeFn != nil {
		tg.closeFn()
	}
}

// openBenchTargets opens one target per --fsync value (one for a running
// cluster), each loaded with load unless --skip-load.
func openBenchTargets(ctx context.Context, o benchClusterOptions, load func(context.Context, kvbench.KV) error) ([]benchTarget, error) {
	var targets []benchTarget
	for _, fs := range o.fsync {
		tg, err := openBenchTarget(ctx, o, fs == "off")
		if err == nil && o.label != "" {
			tg.label = o.label
		}
		if err != nil {
			for _, t := range targets {
				t.close()
			}
			return nil, err
		}
		targets = append(targets, tg)
		if o.skipLoad {
			continue
		}
		fmt.Printf("[%s] loading %d keys...\n", tg.label, o.kv.Keys)
		start := time.Now()
		if err := load(ctx, tg.kv); err != nil {
			for _, t := range targets {
				t.close()
			}
			return nil, fmt.Errorf("[%s] %w", tg.label, err)
		}
		fmt.Printf("[%s] loaded in %.1fs\n", tg.label, time.Since(start).Seconds())
	}
	return targets, nil
}

// openBenchTarget connects to the cluster at --host or --endpoints, or
// starts a new in-process Canopy cluster.
func openBenchTarget(ctx context.Context, o benchClusterOptions, noSync bool) (benchTarget, error) {
	if o.target == "etcd" {
		c, err := etcdbench.Open(ctx, splitHosts(o.endpoints))
		if err != nil {
			return benchTarget{}, err
		}
		return benchTarget{label: "etcd", kv: c, txn: c, closeFn: func() { _ = c.Close() }}, nil
	}
	tg := benchTarget{label: "canopy"}
	addrs := splitHosts(o.host)
	var cluster *testcluster.Cluster
	if o.host == "" {
		tg.label = map[bool]string{false: "fsync", true: "no fsync"}[noSync]
		fmt.Printf("[%s] starting a %d-node cluster in this process (%d user ranges, Raft tick 100ms)...\n", tg.label, o.nodes, o.ranges)
		setNodeGCPercent() // start.go: the nodes' GC target, as in canopy start
		c, err := testcluster.Start(testcluster.Options{
			Nodes: o.nodes, InitialRanges: o.ranges, TickInterval: 100 * time.Millisecond,
			Storage: storage.Options{NoSync: noSync},
			Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		})
		if err != nil {
			return tg, err
		}
		cluster, addrs = c, c.Addrs()
	}
	if o.host != "" {
		var err error
		if tg.tls, err = conn.clientTLS(); err != nil { // conn.go
			return tg, err
		}
	}
	db, err := client.Open(ctx, addrs, client.WithOptions(client.Options{TLS: tg.tls}))
	if err != nil {
		if cluster != nil {
			cluster.Close()
		}
		return tg, err
	}
	tg.kv, tg.txn = db, txnbench.Canopy{DB: db}
	tg.closeFn = func() {
		_ = db.Close()
		if cluster != nil {
			cluster.Close()
		}
	}
	return tg, nil
}

// printBenchHeader prints what every bench table starts with: the
// command, the machine and the workload's bounds.
func printBenchHeader(name, command string, m bench.Machine, o benchClusterOptions, client string) {
	fmt.Printf("canopy bench %s\n  command:  %s\n  machine:  %s\n", name, command, m)
	fmt.Printf("  workload: %d keys, %d-byte values, runs of at most %v and %d ops after a %v warm-up, %s\n",
		o.kv.Keys, o.kv.ValueBytes, o.kv.Duration, o.kv.OpsMax, o.kv.Warmup, client)
	if len(o.pids) > 0 {
		fmt.Printf("  server processes measured: %v\n", o.pids)
	}
}

// startCPUProfile starts --cpuprofile if set; the returned func stops it.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

// writeBenchOutputs prints the rows' errors and the load average, and
// writes <out>.csv and, with --plot, <out>.png.
func writeBenchOutputs(o benchClusterOptions, rows []kvbench.Row, m bench.Machine, title string) error {
	for _, r := range rows {
		if r.Errors > 0 || r.NotFound > 0 {
			fmt.Printf("  %s %s c=%d: %d errors (first: %s), %d gets found nothing\n",
				r.Workload, r.Cluster, r.Concurrency, r.Errors, r.FirstError, r.NotFound)
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
	if !o.plot {
		fmt.Printf("\nwrote %s.csv\n", o.out)
		return nil
	}
	if o.target == "canopy" && o.host == "" {
		title += fmt.Sprintf(", %d nodes in one process on loopback", o.nodes)
	}
	if err := kvbench.WritePlot(o.out+".png", title, rows, m); err != nil {
		return err
	}
	fmt.Printf("\nwrote %s.csv and %s.png\n", o.out, o.out)
	return nil
}

// closeTargets closes every target.
func closeTargets(targets []benchTarget) {
	for _, tg := range targets {
		tg.close()
	}
}

// runBenchPoints runs run for each of points points on each target in
// turn, under the CPU profile if asked, printing each row of the table as
// it comes.
func runBenchPoints(o benchClusterOptions, targets []benchTarget, points int, run func(tg benchTarget, point int, kv kvbench.Options) (kvbench.Result, error)) ([]kvbench.Row, error) {
	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	fmt.Println()
	fmt.Println(kvbench.TableHeader)
	kv := o.kv
	kv.Progress = os.Stderr
	var rows []kvbench.Row
	for p := 0; p < points; p++ {
		for _, tg := range targets {
			r, err := run(tg, p, kv)
			if err != nil {
				return nil, err
			}
			row := kvbench.Row{Cluster: tg.label, ValueBytes: o.kv.ValueBytes, Keys: o.kv.Keys, Result: r}
			kvbench.WriteTableRow(os.Stdout, row)
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// writeHeapProfile writes a pprof heap profile to path+suffix if path is
// set.
func writeHeapProfile(path, suffix string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path + suffix)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
