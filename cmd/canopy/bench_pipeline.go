package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench"
	"github.com/canopy-db/canopy/internal/bench/pipelinebench"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
)

// Bounds of bench pipeline's sweep.
const (
	// PipelineRTTMsMax bounds --rtts and --writes-rtt. Half a round trip
	// (the one-way delay) must also stay at or below 2 Raft ticks
	// (--raft-tick), well below the election timeout of 10 to 20 ticks.
	PipelineRTTMsMax = 200
	// PipelineSweepPointsMax bounds the values of --rtts and of --writes.
	PipelineSweepPointsMax = 64
)

type benchPipelineOptions struct {
	experiments []string
	modes       []string
	rttsMs      []int
	writes      []int
	writesRTTMs int
	ranges      int
	readKeys    int
	limits      pipelinebench.Limits
	runMax      time.Duration
	readyMax    time.Duration
	raftTick    time.Duration
	// quiesceIdleTicks: the idle ticks a range's leader waits before the
	// tick on which it quiesces (replica.QuiesceIdleTicks by default).
	quiesceIdleTicks int
	seed             uint64
	dir              string
	out              string
	replot           string
	cpuProfile       string
}

func init() {
	var o benchPipelineOptions
	cmd := &cobra.Command{
		Use:   "pipeline",
		Short: "The transactional pipelining post's two experiments: latency vs inter-node RTT, and vs writes per transaction",
		Long: `Reproduces the two experiments of CockroachDB's transactional pipelining post
(seed 001, issue 8) on a 3-node cluster started in this process, each point
run with pipelining off ("off"), on ("pipelined"), and on with parallel
commits ("parallel"), set per transaction (one-phase commit off).

The client is co-located with node 1, the gateway: every range's leader
(and leaseholder) is moved there (kvserver.Node.SetLeaderPreference), as the
post assumes leaseholders co-located with the SQL gateway, and a gRPC
interceptor delays every call to another node by the round trip. Raft
messages between nodes are delayed by half the round trip in each
direction (kvserver.LinkFault), so a consensus round costs one round trip.

  rtt:    a New-Order-like transaction (4 reads, then 5 writes, each its own
          statement, over keys spread across --ranges ranges) at each
          round trip of --rtts; prints each mode's slope (ms of latency per
          ms of round trip, least squares) beside the post's 6 and 2 and the
          model's 1 for parallel commits.
  writes: transactions of each --writes count of writes (no reads) at
          --writes-rtt; prints each mode's cost of one more write beside
          the post's "a little under half a millisecond".

The nodes run with --raft-tick (default 100ms, as canopy start): a leader's
lease lasts 9 ticks less the clock drift bound and is renewed only while its
range is awake; a range quiesces on the first tick that finds it without
a write or a read (--quiesce-idle-ticks: idle ticks to wait first),
renewing its lease on that tick instead if the lease served reads since
its last renewal, so a read that finds its range unread for longer than a
lease waits for a ReadIndex round (one round trip).

Every point also shows what the system counted per transaction: consensus
rounds on its critical path (client.RoundCounter), the ReadIndex rounds the
leaseholders ran for it (lapsed leases; the oracle's apart), its Batch RPCs,
oracle Timestamps RPCs, all RPCs, Raft entries and the process's CPU time. A point runs transactions one
at a time for at most --duration and --txns-max after --warmup-txns; the
whole run is bounded by --run-max. Writes <out>_rtt.csv/.png and
<out>_writes.csv/.png and states the machine.`,
		Example: `  canopy bench pipeline
  canopy bench pipeline --experiments rtt --rtts 0,10 --duration 5s --out ""`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if o.replot != "" {
				return replotPipeline(o.replot, o.writesRTTMs)
			}
			return runBenchPipeline(ctx, o, "canopy bench pipeline "+strings.Join(os.Args[3:], " "))
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.experiments, "experiments", []string{"rtt", "writes"}, "experiments to run: rtt, writes")
	f.StringSliceVar(&o.modes, "modes", []string{"off", "pipelined", "parallel"}, "modes each point runs in: off, pipelined, parallel")
	f.IntSliceVar(&o.rttsMs, "rtts", []int{0, 10, 20, 30, 40, 50, 60, 70, 80, 90}, "inter-node round trips of the rtt experiment, ms")
	f.IntSliceVar(&o.writes, "writes", []int{1, 2, 4, 8, 16, 32, 64, 128, 256}, "writes per transaction of the writes experiment")
	f.IntVar(&o.writesRTTMs, "writes-rtt", 10, "inter-node round trip of the writes experiment, ms")
	f.IntVar(&o.ranges, "ranges", 8, "user ranges the keys are spread over (statement i goes to range i mod ranges)")
	f.IntVar(&o.readKeys, "read-keys", 100, "keys loaded per range for the reads")
	f.DurationVar(&o.limits.Duration, "duration", 5*time.Second, "measured time of one point (at most)")
	f.IntVar(&o.limits.TxnsMax, "txns-max", 50, "measured transactions of one point (at most)")
	f.IntVar(&o.limits.WarmupTxns, "warmup-txns", 2, "uncounted transactions before each point")
	f.DurationVar(&o.runMax, "run-max", 15*time.Minute, "bound on the whole run")
	f.DurationVar(&o.readyMax, "ready-max", 2*time.Minute, "bound on start-up (every range with a leader, every leader on the gateway)")
	addQuiesceIdleTicksFlag(cmd, &o.quiesceIdleTicks)
	f.DurationVar(&o.raftTick, "raft-tick", 100*time.Millisecond, "Raft tick of the nodes (canopy start's default); a leader's lease lasts 9 ticks less the clock drift bound, and an idle range quiesces after --quiesce-idle-ticks")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the key choice")
	f.StringVar(&o.dir, "dir", "", "directory of the stores (default: a new temporary directory, removed at the end)")
	f.StringVar(&o.out, "out", "docs/bench/pipeline", "prefix of the CSV and PNG files (empty: write none)")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a pprof CPU profile of the experiments (client and nodes, after start-up and loading) to this file")
	f.StringVar(&o.replot, "replot", "", "run nothing: read <prefix>_rtt.csv and <prefix>_writes.csv of an earlier run, print the fits and redraw the PNGs beside them")
	benchCmd.AddCommand(cmd)
}

func (o *benchPipelineOptions) validate() ([]pipelinebench.Mode, error) {
	var modes []pipelinebench.Mode
	for _, name := range o.modes {
		m, ok := pipelinebench.ModeByName(name)
		if !ok {
			return nil, fmt.Errorf("--modes: unknown mode %q (off, pipelined, parallel)", name)
		}
		modes = append(modes, m)
	}
	for _, e := range o.experiments {
		if e != "rtt" && e != "writes" {
			return nil, fmt.Errorf("--experiments: unknown experiment %q (rtt, writes)", e)
		}
	}
	if len(modes) == 0 || len(o.experiments) == 0 {
		return nil, fmt.Errorf("--modes and --experiments need at least one value")
	}
	if len(o.rttsMs) > PipelineSweepPointsMax || len(o.writes) > PipelineSweepPointsMax {
		return nil, fmt.Errorf("--rtts and --writes take at most %d values", PipelineSweepPointsMax)
	}
	for _, r := range append(slices.Clone(o.rttsMs), o.writesRTTMs) {
		if r < 0 || r > PipelineRTTMsMax {
			return nil, fmt.Errorf("round trip %d ms not in [0, %d]", r, PipelineRTTMsMax)
		}
	}
	for _, w := range o.writes {
		if w < 1 || w > pipelinebench.WritesMax {
			return nil, fmt.Errorf("--writes %d not in [1, %d]", w, pipelinebench.WritesMax)
		}
	}
	if err := (pipelinebench.Keyspace{Ranges: o.ranges, ReadKeysPerRange: o.readKeys}).Validate(); err != nil {
		return nil, err
	}
	if err := o.limits.Validate(); err != nil {
		return nil, err
	}
	if o.runMax <= 0 || o.readyMax <= 0 {
		return nil, fmt.Errorf("--run-max and --ready-max must be positive")
	}
	if o.raftTick < 10*time.Millisecond || o.raftTick > time.Second {
		return nil, fmt.Errorf("--raft-tick %v not in [10ms, 1s]", o.raftTick)
	}
	if err := checkRange("quiesce-idle-ticks", o.quiesceIdleTicks, 0, QuiesceIdleTicksMax); err != nil {
		return nil, err
	}
	for _, r := range append(slices.Clone(o.rttsMs), o.writesRTTMs) {
		// Elections take at least 10 ticks; a one-way delay near that
		// would measure elections, not transactions.
		if time.Duration(r)*time.Millisecond/2 > 2*o.raftTick {
			return nil, fmt.Errorf("round trip %d ms: half of it is above 2 Raft ticks (%v); raise --raft-tick", r, o.raftTick)
		}
	}
	return modes, nil
}

func runBenchPipeline(ctx context.Context, o benchPipelineOptions, command string) error {
	modes, err := o.validate()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.runMax)
	defer cancel()
	m := bench.ThisMachine()
	fmt.Printf("canopy bench pipeline\n  command:  %s\n  machine:  %s\n", command, m)
	fmt.Printf("  workload: 3 nodes in this process (Raft tick %v), client co-located with node 1 (every leader moved there); %d user ranges; "+
		"transactions one at a time, each point at most %v and %d txns after %d warm-up txns; modes %s\n\n",
		o.raftTick, o.ranges, o.limits.Duration, o.limits.TxnsMax, o.limits.WarmupTxns, strings.Join(o.modes, ", "))

	pc, err := startPipelineCluster(ctx, o)
	if err != nil {
		return err
	}
	defer pc.close()
	r := &pipelinebench.Runner{
		DB: pc.db, Calls: pc.calls, Keys: pipelinebench.Keyspace{Ranges: o.ranges, ReadKeysPerRange: o.readKeys},
		Raft: pc.raftEntries, Progress: os.Stderr, Rand: rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15)),
	}
	fmt.Fprintf(os.Stderr, "loading %d read keys in each of %d ranges...\n", o.readKeys, o.ranges)
	if err := pipelinebench.Load(ctx, pc.db, r.Keys); err != nil {
		return err
	}
	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	for _, e := range o.experiments {
		switch e {
		case "rtt":
			err = runPipelineRTT(ctx, o, pc, r, modes, m)
		case "writes":
			err = runPipelineWrites(ctx, o, pc, r, modes, m)
		}
		if err != nil {
			return err
		}
	}
	if end := bench.ThisMachine().LoadAverage; end != "" {
		fmt.Printf("load average at end: %s (at start: %s; %d CPUs)\n", end, m.LoadAverage, m.CPUs)
	}
	return nil
}

func runPipelineRTT(ctx context.Context, o benchPipelineOptions, pc *pipelineCluster, r *pipelinebench.Runner, modes []pipelinebench.Mode, m bench.Machine) error {
	fmt.Fprintf(os.Stderr, "experiment rtt: %d reads + %d writes at round trips %v ms\n", pipelinebench.NewOrder.Reads, pipelinebench.NewOrder.Writes, o.rttsMs)
	var points []pipelinebench.Point
	for _, rtt := range o.rttsMs {
		pc.setRTT(time.Duration(rtt) * time.Millisecond)
		for _, mode := range modes {
			p, err := r.Run(ctx, mode, pipelinebench.NewOrder, float64(rtt), o.limits)
			if err != nil {
				return fmt.Errorf("rtt %d ms, %s: %w", rtt, mode.Name, err)
			}
			points = append(points, p)
		}
	}
	fmt.Printf("Experiment 1: New-Order-like transaction (%d reads, %d writes, one statement each) vs inter-node round trip\n\n",
		pipelinebench.NewOrder.Reads, pipelinebench.NewOrder.Writes)
	pipelinebench.WritePointTable(os.Stdout, points)
	fmt.Printf("%s\n\n", pipelinebench.PointTableLegend)
	if len(o.rttsMs) >= 2 {
		fits, err := pipelinebench.FitModes(points, pipelinebench.RTTX)
		if err != nil {
			return err
		}
		fmt.Println("Slope of transaction latency against round trip (ms per ms of RTT, least squares over the points above):")
		pipelinebench.WriteRTTSummary(os.Stdout, fits)
		fmt.Println()
	}
	if o.out == "" {
		return nil
	}
	if err := pipelinebench.WriteCSV(o.out+"_rtt.csv", "rtt", m.String(), points); err != nil {
		return err
	}
	if err := pipelinebench.WriteRTTPlot(o.out+"_rtt.png", m.String(), points); err != nil {
		return err
	}
	fmt.Printf("wrote %s_rtt.csv and %s_rtt.png\n\n", o.out, o.out)
	return nil
}

func runPipelineWrites(ctx context.Context, o benchPipelineOptions, pc *pipelineCluster, r *pipelinebench.Runner, modes []pipelinebench.Mode, m bench.Machine) error {
	fmt.Fprintf(os.Stderr, "experiment writes: %v writes at %d ms round trip\n", o.writes, o.writesRTTMs)
	pc.setRTT(time.Duration(o.writesRTTMs) * time.Millisecond)
	var points []pipelinebench.Point
	for _, w := range o.writes {
		for _, mode := range modes {
			p, err := r.Run(ctx, mode, pipelinebench.Shape{Writes: w}, float64(o.writesRTTMs), o.limits)
			if err != nil {
				return fmt.Errorf("%d writes, %s: %w", w, mode.Name, err)
			}
			points = append(points, p)
		}
	}
	fmt.Printf("Experiment 2: writes per transaction (one statement each, no reads) vs latency at %d ms round trip\n\n", o.writesRTTMs)
	pipelinebench.WritePointTable(os.Stdout, points)
	fmt.Printf("%s\n\n", pipelinebench.PointTableLegend)
	if len(o.writes) >= 2 {
		fits, err := pipelinebench.FitModes(points, pipelinebench.WritesX)
		if err != nil {
			return err
		}
		fmt.Println("Cost of one more write (slope of latency against writes, least squares over the points above):")
		pipelinebench.WriteWritesSummary(os.Stdout, fits)
		fmt.Println()
	}
	if o.out == "" {
		return nil
	}
	if err := pipelinebench.WriteCSV(o.out+"_writes.csv", "writes", m.String(), points); err != nil {
		return err
	}
	if err := pipelinebench.WriteWritesPlot(o.out+"_writes.png", m.String(), float64(o.writesRTTMs), points); err != nil {
		return err
	}
	fmt.Printf("wrote %s_writes.csv and %s_writes.png\n\n", o.out, o.out)
	return nil
}

// replotPipeline prints the fits of an earlier run's CSV files and draws
// their PNGs again (after a change to the plots). writesRTTMs titles the
// writes plot when its CSV has no point (a CSV records each point's RTT).
func replotPipeline(prefix string, writesRTTMs int) error {
	if points, machine, err := pipelinebench.ReadCSV(prefix + "_rtt.csv"); err == nil {
		fits, err := pipelinebench.FitModes(points, pipelinebench.RTTX)
		if err != nil {
			return err
		}
		pipelinebench.WriteRTTSummary(os.Stdout, fits)
		if err := pipelinebench.WriteRTTPlot(prefix+"_rtt.png", machine, points); err != nil {
			return err
		}
		fmt.Printf("wrote %s_rtt.png\n\n", prefix)
	} else if !os.IsNotExist(err) {
		return err
	}
	if points, machine, err := pipelinebench.ReadCSV(prefix + "_writes.csv"); err == nil {
		fits, err := pipelinebench.FitModes(points, pipelinebench.WritesX)
		if err != nil {
			return err
		}
		pipelinebench.WriteWritesSummary(os.Stdout, fits)
		rtt := float64(writesRTTMs)
		if len(points) > 0 {
			rtt = points[0].RTTMs
		}
		if err := pipelinebench.WriteWritesPlot(prefix+"_writes.png", machine, rtt, points); err != nil {
			return err
		}
		fmt.Printf("wrote %s_writes.png\n", prefix)
	} else if !os.IsNotExist(err) {
		return err
	}
	return nil
}

// pipelineCluster is the cluster of bench pipeline and its client.
type pipelineCluster struct {
	c     *testcluster.Cluster
	ids   []uint64 // node IDs, by index
	db    *client.DB
	calls *pipelinebench.CallCounter
}

// startPipelineCluster starts three nodes, moves every leader to node 1
// and opens the client through the delaying interceptor.
func startPipelineCluster(ctx context.Context, o benchPipelineOptions) (*pipelineCluster, error) {
	fmt.Fprintf(os.Stderr, "starting a 3-node cluster in this process...\n")
	setNodeGCPercent() // start.go: the nodes' GC target, as in canopy start
	c, err := testcluster.Start(testcluster.Options{
		Nodes: 3, InitialRanges: o.ranges, Dir: o.dir, ReadyTimeout: o.readyMax, TickInterval: o.raftTick, QuiesceIdleTicks: o.quiesceIdleTicks,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return nil, err
	}
	pc := &pipelineCluster{c: c}
	for i := 0; i < 3; i++ {
		pc.ids = append(pc.ids, c.Node(i).NodeID())
	}
	for i := 0; i < 3; i++ {
		c.Node(i).SetLeaderPreference(pc.ids[0])
	}
	if err := pc.waitLeaders(ctx, o.readyMax); err != nil {
		c.Close()
		return nil, err
	}
	pc.calls = pipelinebench.NewCallCounter(c.Addrs()[0])
	pc.db, err = client.Open(ctx, c.Addrs(), client.WithDialOptions(grpc.WithChainUnaryInterceptor(pc.calls.Interceptor())))
	if err != nil {
		c.Close()
		return nil, err
	}
	return pc, nil
}

// waitLeaders waits until node 1 leads every range.
func (pc *pipelineCluster) waitLeaders(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	start := time.Now()
	for {
		st, err := pc.c.Node(0).Status(ctx)
		if err != nil {
			return err
		}
		away := 0
		for _, r := range st.Ranges {
			if r.LeaderNodeId != pc.ids[0] {
				away++
			}
		}
		if away == 0 {
			fmt.Fprintf(os.Stderr, "node 1 (id %d) leads all %d ranges after %.1fs\n", pc.ids[0], len(st.Ranges), time.Since(start).Seconds())
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d ranges still led elsewhere after %v: %w", away, len(st.Ranges), limit, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// setRTT delays Raft messages between every two nodes by rtt/2 each way
// and the client's calls to nodes 2 and 3 by rtt.
func (pc *pipelineCluster) setRTT(rtt time.Duration) {
	for i := range pc.ids {
		for j, to := range pc.ids {
			if i != j {
				pc.c.Node(i).SetLinkFault(to, kvserver.LinkFault{Delay: rtt / 2})
			}
		}
	}
	pc.calls.SetRemoteDelay(rtt)
}

// raftEntries sums the committed Raft indexes of node 1's replicas (it
// holds one of every range) and the ReadIndex rounds they waited for (it
// leads every range).
func (pc *pipelineCluster) raftEntries(ctx context.Context) (pipelinebench.RaftCounts, error) {
	st, err := pc.c.Node(0).Status(ctx)
	if err != nil {
		return pipelinebench.RaftCounts{}, err
	}
	var rc pipelinebench.RaftCounts
	for _, r := range st.Ranges {
		rc.Entries += r.RaftCommittedIndex
		if r.Range.GetRangeId() == kvserver.OracleRangeID {
			rc.OracleEntries += r.RaftCommittedIndex
		}
	}
	all, oracle := pc.c.Node(0).ReadIndexRounds()
	rc.ReadIndex, rc.OracleReadIndex = all-oracle, oracle
	for i := range pc.ids {
		if n := pc.c.Node(i); n != nil {
			b, held := n.LinkDelays()
			rc.DelayedBatches += b
			rc.DelayedHeld += held
		}
	}
	return rc, nil
}

func (pc *pipelineCluster) close() {
	if pc.db != nil {
		_ = pc.db.Close()
	}
	pc.c.Close()
}
