package main

import (
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench"
	"github.com/canopy-db/canopy/internal/bench/kvbench"
	"github.com/canopy-db/canopy/internal/bench/plot"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/spf13/cobra"
)

// RangesMax bounds --ranges: beyond it a cluster in one process is not a
// measurement of anything but the machine's memory.
const RangesMax = 100_000

// QuiesceIdleTicksMax bounds --quiesce-idle-ticks.
const QuiesceIdleTicksMax = 100

// addQuiesceIdleTicksFlag adds --quiesce-idle-ticks (bench ranges, bench
// pipeline): the idle ticks a range's leader waits before the tick on
// which it quiesces the range (default replica.QuiesceIdleTicks, 0);
// checked against QuiesceIdleTicksMax.
func addQuiesceIdleTicksFlag(cmd *cobra.Command, v *int) {
	cmd.Flags().IntVar(v, "quiesce-idle-ticks", replica.QuiesceIdleTicks, "idle Raft ticks a range's leader waits before the tick on which it quiesces the range (0: it quiesces on the first tick that finds the range idle)")
}

type benchRangesOptions struct {
	ranges      []int
	idle        time.Duration
	settle      time.Duration
	cpuProfile  string
	putProfile  string
	memProfile  string
	concurrency int
	// quiesceIdleTicks: the idle ticks a range's leader waits before the
	// tick on which it quiesces (replica.QuiesceIdleTicks by default).
	quiesceIdleTicks int
	readyMax         time.Duration
	out              string
	kv               kvbench.Options
}

func init() {
	var o benchRangesOptions
	cmd := &cobra.Command{
		Use:   "ranges",
		Short: "Idle CPU and put throughput of a 3-node cluster against its number of ranges",
		Long: `For each value of --ranges, starts a 3-node cluster in this process with that
many user ranges (plus the system ranges), waits until every range has a
leader, measures the CPU the idle cluster uses over --idle (as a percentage
of one core), then runs single-key puts with --concurrency clients for
--duration. Beside each put run's rate and latency, the table gives what
the nodes counted per put over the measured time (Raft messages sent,
ranges handled by the Raft schedulers, synced group commits) and the process's CPU per put, which
show where the cost of more ranges goes. Prints a table, writes
<out>.csv and <out>.png, and states the machine. Every step is bounded: start-up by --ready-max, the runs by
--duration and --ops-max.`,
		Example: `  canopy bench ranges --ranges 6,1000,10000 --idle 10s --duration 10s`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchRanges(ctx, o, "canopy bench ranges "+strings.Join(os.Args[3:], " "))
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.ranges, "ranges", []int{6, 1000, 10000}, "user ranges of each cluster; one cluster per value, a value given again is another round of it")
	f.DurationVar(&o.idle, "idle", 10*time.Second, "how long the idle cluster's CPU is measured")
	f.DurationVar(&o.settle, "settle", 30*time.Second, "wait after start-up before the idle measurement (elections, lease acquisition and quiescence settle)")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a pprof CPU profile of the idle window of the last cluster to this file")
	f.StringVar(&o.putProfile, "put-cpuprofile", "", "write a pprof CPU profile of each cluster's put run (warm-up included) to this file; with several clusters, to FILE.<ranges>-r<round>")
	f.StringVar(&o.memProfile, "memprofile", "", "write pprof heap profiles at the start (<file>.base) and the end (<file>) of the idle window of the last cluster: go tool pprof -sample_index=alloc_space -diff_base <file>.base <file> shows what the idle window allocated")
	addQuiesceIdleTicksFlag(cmd, &o.quiesceIdleTicks)
	f.IntVar(&o.concurrency, "concurrency", 64, "concurrent clients of the put run")
	f.DurationVar(&o.readyMax, "ready-max", 10*time.Minute, "bound on a cluster's start-up (every range with a leader)")
	f.IntVar(&o.kv.ValueBytes, "value-bytes", 256, "bytes per value")
	f.IntVar(&o.kv.Keys, "keys", 10000, "keys in the keyspace (written once before the run)")
	f.DurationVar(&o.kv.Duration, "duration", 10*time.Second, "measured time of the put run (at most)")
	f.Int64Var(&o.kv.OpsMax, "ops-max", 1_000_000, "operations of the put run (at most)")
	f.DurationVar(&o.kv.Warmup, "warmup", time.Second, "uncounted warm-up at the start of the put run")
	f.StringVar(&o.out, "out", "docs/bench/ranges", "prefix of the CSV and PNG files (empty: write none)")
	benchCmd.AddCommand(cmd)
}

type rangesRow struct {
	userRanges, totalRanges int
	// round counts the earlier rows with the same userRanges: a value
	// given to --ranges again is another round of it.
	round          int
	startup        time.Duration
	idleCPUPercent float64
	put            kvbench.Result
	// perPut is what the three nodes counted over the put run's measured
	// time, per put counted: Raft messages sent, ranges handled by the
	// Raft schedulers, and synced group commits.
	perPut struct{ msgs, handled, syncs float64 }
}

// raftCounts are a cluster's Raft counters, summed over its nodes.
type raftCounts struct{ msgs, handled, syncs uint64 }

func clusterRaftCounts(c *testcluster.Cluster) raftCounts {
	var rc raftCounts
	for i := range c.Addrs() {
		if n := c.Node(i); n != nil {
			m := n.RaftSchedulerMetrics()
			rc.msgs += n.RaftMessagesSent()
			rc.handled += m.RangesHandled
			rc.syncs += m.Syncs
		}
	}
	return rc
}

func runBenchRanges(ctx context.Context, o benchRangesOptions, command string) error {
	o.kv.EnsureDefaults()
	if err := o.kv.Validate(); err != nil {
		return err
	}
	for _, n := range o.ranges {
		if n < 1 || n > RangesMax {
			return fmt.Errorf("--ranges %d not in [1, %d]", n, RangesMax)
		}
	}
	if err := checkRange("quiesce-idle-ticks", o.quiesceIdleTicks, 0, QuiesceIdleTicksMax); err != nil {
		return err
	}
	if o.settle < 0 {
		return fmt.Errorf("--settle must not be negative")
	}
	if o.idle <= 0 || o.concurrency < 1 || o.concurrency > kvbench.ConcurrencyMax {
		return fmt.Errorf("--idle must be positive and --concurrency in [1, %d]", kvbench.ConcurrencyMax)
	}
	m := bench.ThisMachine()
	fmt.Printf("canopy bench ranges\n  command:  %s\n  machine:  %s\n", command, m)
	fmt.Printf("  workload: idle %v, then puts of %d-byte values over %d keys, %d clients, at most %v and %d ops after a %v warm-up; ranges quiesce on the first tick (of 100ms) after %d idle ticks\n\n",
		o.idle, o.kv.ValueBytes, o.kv.Keys, o.concurrency, o.kv.Duration, o.kv.OpsMax, o.kv.Warmup, o.quiesceIdleTicks)
	var rows []rangesRow
	for i, n := range o.ranges {
		round := 0
		for _, m := range o.ranges[:i] {
			if m == n {
				round++
			}
		}
		oc := o
		if oc.putProfile != "" && len(o.ranges) > 1 {
			oc.putProfile = fmt.Sprintf("%s.%d-r%d", o.putProfile, n, round+1)
		}
		row, err := benchRangesOne(ctx, oc, n)
		if err != nil {
			return fmt.Errorf("%d ranges: %w", n, err)
		}
		row.round = round
		rows = append(rows, row)
	}
	fmt.Println()
	fmt.Printf("%12s %6s %12s %10s %14s %10s %8s %8s %10s %12s %10s %11s\n", "user ranges", "round", "all ranges", "start s", "idle cpu %", "put ops/s", "p50 ms", "p99 ms",
		"msgs/put", "handled/put", "syncs/put", "cpu µs/put")
	for _, r := range rows {
		fmt.Printf("%12d %6d %12d %10.1f %14.1f %10.1f %8.2f %8.2f %10.2f %12.2f %10.3f %11.0f\n", r.userRanges, r.round+1, r.totalRanges, r.startup.Seconds(), r.idleCPUPercent,
			r.putRate(), ms(r.put.All.P50), ms(r.put.All.P99), r.perPut.msgs, r.perPut.handled, r.perPut.syncs, r.cpuPerPut())
	}
	fmt.Println("msgs/put: Raft messages the three nodes sent; handled/put: ranges their Raft schedulers handled (an inbox drained and")
	fmt.Println("its Ready, if any, processed); syncs/put: their synced group commits; cpu µs/put: this process's CPU (the three nodes and")
	fmt.Println("the clients); each over the put run's measured time, per put counted")
	printRangesRatios(rows)
	if o.out == "" {
		return nil
	}
	return writeRangesOutput(o.out, m, rows)
}

func benchRangesOne(ctx context.Context, o benchRangesOptions, n int) (rangesRow, error) {
	row := rangesRow{userRanges: n}
	fmt.Printf("[%d ranges] starting a 3-node cluster in this process...\n", n)
	start := time.Now()
	setNodeGCPercent() // start.go: the nodes' GC target, as in canopy start
	c, err := testcluster.Start(testcluster.Options{
		Nodes: 3, InitialRanges: n, TickInterval: 100 * time.Millisecond, ReadyTimeout: o.readyMax, QuiesceIdleTicks: o.quiesceIdleTicks,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return row, err
	}
	defer c.Close()
	row.startup = time.Since(start)
	descs, err := c.RangeDescriptors(ctx)
	if err != nil {
		return row, err
	}
	row.totalRanges = len(descs)
	fmt.Printf("[%d ranges] up in %.1fs with %d ranges; settling for %v, then measuring idle CPU for %v...\n",
		n, row.startup.Seconds(), row.totalRanges, o.settle, o.idle)
	if err := sleepCtx(ctx, o.settle); err != nil {
		return row, err
	}
	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return row, err
	}
	if err := writeHeapProfile(o.memProfile, ".base"); err != nil {
		return row, err
	}
	cpu0, t0 := kvbench.ProcessCPU(), time.Now()
	err = sleepCtx(ctx, o.idle)
	row.idleCPUPercent = 100 * float64(kvbench.ProcessCPU()-cpu0) / float64(time.Since(t0))
	stopProfile()
	if err := writeHeapProfile(o.memProfile, ""); err != nil {
		return row, err
	}
	if err != nil {
		return row, err
	}
	db, err := client.Open(ctx, c.Addrs())
	if err != nil {
		return row, err
	}
	defer db.Close()
	fmt.Printf("[%d ranges] idle: %.1f%% of a core; loading %d keys...\n", n, row.idleCPUPercent, o.kv.Keys)
	if err := kvbench.Load(ctx, db, o.kv); err != nil {
		return row, err
	}
	kv := o.kv
	kv.Progress = os.Stderr
	stopPutProfile, err := startCPUProfile(o.putProfile)
	if err != nil {
		return row, err
	}
	var before, after raftCounts
	kv.Measured = func(start bool) {
		if start {
			before = clusterRaftCounts(c)
		} else {
			after = clusterRaftCounts(c)
		}
	}
	row.put, err = kvbench.Run(ctx, db, kv, 0, o.concurrency)
	stopPutProfile()
	if puts := float64(row.put.Ops); err == nil && puts > 0 {
		row.perPut.msgs = float64(after.msgs-before.msgs) / puts
		row.perPut.handled = float64(after.handled-before.handled) / puts
		row.perPut.syncs = float64(after.syncs-before.syncs) / puts
	}
	return row, err
}

// cpuPerPut is this process's CPU per put over the measured time, in µs
// (0 where the platform cannot tell).
func (r rangesRow) cpuPerPut() float64 {
	if r.put.Ops == 0 {
		return 0
	}
	return float64(r.put.ProcessCPU/time.Microsecond) / float64(r.put.Ops)
}

// putRate is the put run's throughput in operations per second.
func (r rangesRow) putRate() float64 { return float64(r.put.Ops) / r.put.Elapsed.Seconds() }

// printRangesRatios prints, for each range count other than the first one
// given, its put throughput against the first's: per round (the k-th
// cluster of each count against the k-th of the first; they ran next to
// each other when the values are given interleaved, as in
// --ranges 12,10000,12,10000) and as the ratio of the means over the
// rounds, which shows how far the ratio moves from run to run.
func printRangesRatios(rows []rangesRow) {
	if len(rows) < 2 {
		return
	}
	base := rows[0].userRanges
	mean := func(n int) (float64, []rangesRow) {
		var sum float64
		var rr []rangesRow
		for _, r := range rows {
			if r.userRanges == n {
				sum += r.putRate()
				rr = append(rr, r)
			}
		}
		return sum / float64(len(rr)), rr
	}
	baseMean, baseRows := mean(base)
	var seen []int
	for _, r := range rows {
		if r.userRanges == base || slices.Contains(seen, r.userRanges) {
			continue
		}
		seen = append(seen, r.userRanges)
		m, rr := mean(r.userRanges)
		var each []string
		for _, x := range rr {
			for _, b := range baseRows {
				if b.round == x.round {
					each = append(each, fmt.Sprintf("%.2f", x.putRate()/b.putRate()))
				}
			}
		}
		fmt.Printf("put throughput at %d user ranges / at %d: %.2f (means over %d and %d rounds)",
			r.userRanges, base, m/baseMean, len(rr), len(baseRows))
		if len(rr) > 1 || len(baseRows) > 1 {
			fmt.Printf("; round by round: %s", strings.Join(each, ", "))
		}
		fmt.Println()
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func writeRangesOutput(out string, m bench.Machine, rows []rangesRow) error {
	f, err := os.Create(out + ".csv")
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"user_ranges", "round", "all_ranges", "startup_s", "idle_cpu_percent_of_core", "put_ops_per_s", "put_p50_ms", "put_p99_ms", "put_errors",
		"raft_msgs_per_put", "ranges_handled_per_put", "syncs_per_put", "cpu_us_per_put", "machine"})
	for _, r := range rows {
		_ = w.Write([]string{strconv.Itoa(r.userRanges), strconv.Itoa(r.round + 1), strconv.Itoa(r.totalRanges), fmt.Sprintf("%.1f", r.startup.Seconds()),
			fmt.Sprintf("%.2f", r.idleCPUPercent), fmt.Sprintf("%.1f", r.putRate()),
			fmt.Sprintf("%.2f", ms(r.put.All.P50)), fmt.Sprintf("%.2f", ms(r.put.All.P99)), strconv.FormatInt(r.put.Errors, 10),
			fmt.Sprintf("%.3f", r.perPut.msgs), fmt.Sprintf("%.3f", r.perPut.handled), fmt.Sprintf("%.4f", r.perPut.syncs), fmt.Sprintf("%.1f", r.cpuPerPut()), m.String()})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// One series per round, each in the order of its range counts.
	var idle, puts []plot.Series
	for round := 0; ; round++ {
		var rr []rangesRow
		for _, r := range rows {
			if r.round == round {
				rr = append(rr, r)
			}
		}
		if len(rr) == 0 {
			break
		}
		slices.SortStableFunc(rr, func(a, b rangesRow) int { return cmp.Compare(a.totalRanges, b.totalRanges) })
		is, ps := plot.Series{Name: fmt.Sprintf("round %d", round+1)}, plot.Series{Name: fmt.Sprintf("round %d", round+1)}
		for _, r := range rr {
			is.X, is.Y = append(is.X, float64(r.totalRanges)), append(is.Y, r.idleCPUPercent)
			ps.X, ps.Y = append(ps.X, float64(r.totalRanges)), append(ps.Y, r.putRate())
		}
		idle, puts = append(idle, is), append(puts, ps)
	}
	// The legend in a panel of its own: inside a chart it covered the
	// leftmost points.
	img := plot.Grid("canopy bench ranges", m.String(), 3, 480, 360,
		plot.LineChart{Title: "idle CPU", XLabel: "ranges", YLabel: "% of one core", LogX: true, Series: idle, HideLegend: true},
		plot.LineChart{Title: "puts", XLabel: "ranges", YLabel: "ops/s", LogX: true, Series: puts, HideLegend: true},
		plot.Legend{Title: "round", Series: puts},
	)
	if err := plot.WritePNG(out+".png", img); err != nil {
		return err
	}
	fmt.Printf("wrote %s.csv and %s.png\n", out, out)
	return nil
}
