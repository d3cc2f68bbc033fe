package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench"
	"github.com/canopy-db/canopy/internal/bench/hierbench"
	"github.com/canopy-db/canopy/internal/hierarchy"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// Bounds of bench hierarchy.
const (
	// HierarchyOneWayDelayMax bounds --one-way-delay.
	HierarchyOneWayDelayMax = 50 * time.Millisecond
	// HierarchyClientPointsMax bounds the values of --clients.
	HierarchyClientPointsMax = 32
	// HierarchyDBConnsMax bounds --db-conns.
	HierarchyDBConnsMax = 64
)

type benchHierarchyOptions struct {
	systems  []string
	clients  []int
	objects  int
	oneWay   time.Duration
	limits   hierbench.Limits
	rf       int
	dbConns  int
	loadPar  int
	runMax   time.Duration
	readyMax time.Duration
	seed     uint64
	dir      string
	out      string
	raftTick time.Duration
	// disjoint: each client updates objects of its own (the stand-in for
	// the thesis's validation logic off).
	disjoint bool
	// batchTimeout: the hierarchy's batch timeout.
	batchTimeout time.Duration
	// batchSizes: the batch-size sweep (thesis figure 4.7), empty for none.
	batchSizes []int
	// shares: the fractions of distributed transactions of each point.
	shares []float64
	// rounds: repetitions of the whole sequence of points.
	rounds int
	// compact: compact every node's store after the load.
	compact bool
	// think: the clients' mean pause between transactions (0: none).
	think time.Duration
	// cpuProfile: where to write a CPU profile of the points.
	cpuProfile string
}

// HierarchyRoundsMax bounds --rounds.
const HierarchyRoundsMax = 10

func init() {
	var o benchHierarchyOptions
	cmd := &cobra.Command{
		Use:   "hierarchy",
		Short: "The hierarchical-validation thesis's experiments: throughput and latency vs clients for each commit protocol",
		Long: `Reproduces the experiments of the hierarchical deferred validation thesis
(seed 004, chapter 4) on Canopy's commit protocols. Each system of --systems
gets its own cluster (its commit protocol is fixed at init) of 8 nodes in
this process, the user keyspace split into 8 ranges, one led by each node
(--replication-factor 1 by default, as the thesis disabled replication),
loaded with --objects objects of 1,000 bytes. Then, for each --clients
count, closed-loop clients run transactions of 8 updates (a read then a
write of one uniformly chosen object) each on a different node, for
--warmup then --duration. Every cluster is started and loaded first, then
the points are interleaved: each client count runs on every system in turn,
so that other work on the machine weighs on the systems alike.

Every client RPC is delayed by --one-way-delay before it is sent and again
before its reply returns (the thesis's clients ran on their own machines);
Raft messages between nodes are delayed by the same amount
(kvserver.LinkFault), which matters only with --replication-factor above 1.

Systems: ` + hierbench.Names() + `,
or a hierarchy protocol with any batch from /b1 to /b1000 (e.g.
hierarchy-locking/b25). The hierarchy's systems run with batches of that
many votes and decisions per message (each waiting at most --batch-timeout);
their messages and steps per transaction are counted by the validators.
--batch-sizes sweeps the batch (the thesis's figure 4.7, latency vs batch
size at 100 clients): each hierarchy system of --systems, named with or
without /bN, becomes one system per batch size; the plot is then against
the batch size.

--distributed-share mixes local and distributed transactions: each
transaction is distributed (one object on each of the 8 nodes, as above)
with that probability, else local (8 distinct objects of one node, which
the hierarchy decides at that node's leaf). Several values run each
system at each share in turn; the table then has a row per class of
transaction, and the local transactions' latency at each share above 0 is
compared with that at share 0 of the same system, clients and round (the
issue's target: local p99 within 10% with 50% distributed transactions).
--rounds repeats the whole sequence of points, to show the run-to-run
variation.

--disjoint gives each client objects of its own (on every node, the
objects j with j mod clients = client), so that no two transactions
conflict and every one commits at its first attempt: the stand-in for the
thesis's runs with validation logic off (4.2, figures 4.1 to 4.6), in which
every transaction committed. The checks still run (they cannot fail), and
the nodes still read and write their stores, which the thesis's runs did
not. Without it (the default) keys are uniform over all objects: the
thesis's runs with validation on (4.3).

Prints a table per run with what the system counted per transaction (client
RPCs; the commit protocol's messages and steps beside the thesis's
formulas; the one-way delay realized on client RPCs and validator links,
which Go's timers make longer than a sub-millisecond delay asked for; the
CPU the process used), writes <out>.csv and <out>.png and states the
machine.

--think gives each client a pause between transactions (uniform, with that
mean), so that the offered load stays below what saturates the machine and
a latency measures the protocol's waits more than the queue for the cores.

Every point is bounded by --warmup + --duration, the whole run by --run-max.`,
		Example: `  canopy bench hierarchy
  canopy bench hierarchy --systems 2pc-locking,default --clients 1,10,50 --objects 8000 --duration 5s --out ""
  canopy bench hierarchy --systems 2pc-locking,hierarchy-locking/b10 --clients 10,50,100 --objects 8000 --disjoint`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchHierarchy(ctx, o, "canopy bench hierarchy "+strings.Join(os.Args[3:], " "))
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.systems, "systems", []string{"2pc-locking", "default"}, "systems to run, in order")
	f.IntSliceVar(&o.clients, "clients", []int{1, 10, 25, 50, 100}, "closed-loop clients of each point")
	f.IntVar(&o.objects, "objects", hierbench.ObjectsMax, fmt.Sprintf("objects of 1,000 bytes, spread over the 8 nodes (default and at most %d, the thesis's; loading takes about 2 minutes per system on 2 cores; fewer objects mean more conflicts than the thesis's)", hierbench.ObjectsMax))
	f.DurationVar(&o.oneWay, "one-way-delay", 250*time.Microsecond, "injected per-link one-way delay (a LAN: 0.25 ms, i.e. 0.5 ms round trip; Go's timers make a sub-millisecond delay longer, and the table states the delay realized)")
	f.DurationVar(&o.limits.Duration, "duration", 10*time.Second, "measured time of one point")
	f.DurationVar(&o.limits.Warmup, "warmup", 2*time.Second, "unmeasured time before each point")
	f.IntVar(&o.rf, "replication-factor", 1, "replicas per range (the thesis: 1, no replication)")
	f.IntVar(&o.dbConns, "db-conns", 8, "client connections (client.DB) the clients share")
	f.IntVar(&o.loadPar, "load-parallel", 64, "parallel writers of the load")
	f.BoolVar(&o.compact, "compact", true, "compact every node's store after the load, so that no point shares the cores with the load's compactions (which stalled writes for seconds at 800,000 objects)")
	f.DurationVar(&o.runMax, "run-max", 30*time.Minute, "bound on the whole run")
	f.DurationVar(&o.readyMax, "ready-max", 2*time.Minute, "bound on each cluster's start-up")
	f.DurationVar(&o.raftTick, "raft-tick", 100*time.Millisecond, "Raft tick of the nodes (canopy start's default)")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the clients' key choices")
	f.StringVar(&o.dir, "dir", "", "directory of the stores (default: a new temporary directory per system, removed at the end)")
	f.StringVar(&o.out, "out", "docs/bench/hierarchy", "prefix of the CSV and PNG files (empty: write none)")
	f.IntSliceVar(&o.batchSizes, "batch-sizes", nil, "hierarchy systems: batch sizes to sweep (e.g. 1,5,10,25,50,100; empty: each system's own)")
	f.Float64SliceVar(&o.shares, "distributed-share", []float64{1}, "fractions of distributed transactions, in [0, 1], one point per value (the rest are local)")
	f.IntVar(&o.rounds, "rounds", 1, fmt.Sprintf("repetitions of the whole sequence of points (at most %d)", HierarchyRoundsMax))
	f.BoolVar(&o.disjoint, "disjoint", false, "each client updates objects of its own: no conflicts (the stand-in for the thesis's validation logic off)")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a pprof CPU profile of the points (nodes, validators and clients; not start-up and loading) to this file")
	f.DurationVar(&o.think, "think", 0, "each client's mean pause between transactions (uniform in [0, 2x]; 0: closed loop without pauses): bounds the offered load below what saturates the machine")
	f.DurationVar(&o.batchTimeout, "batch-timeout", time.Millisecond, "hierarchy systems: how long a batch of votes or decisions that has not filled up waits")
	benchCmd.AddCommand(cmd)
}

func (o *benchHierarchyOptions) validate() ([]hierbench.System, error) {
	systems, err := hierbench.ExpandSystems(o.systems, o.batchSizes)
	if err != nil {
		return nil, fmt.Errorf("--systems / --batch-sizes: %w", err)
	}
	for _, s := range systems {
		if !s.Built {
			return nil, fmt.Errorf("--systems: %s is not built yet", s.Name)
		}
	}
	if len(o.shares) == 0 || len(o.shares) > HierarchyClientPointsMax {
		return nil, fmt.Errorf("--distributed-share takes 1 to %d values", HierarchyClientPointsMax)
	}
	for _, sh := range o.shares {
		if err := (hierbench.Keyspace{Objects: o.objects}).ValidateShare(sh); err != nil {
			return nil, fmt.Errorf("--distributed-share: %w", err)
		}
	}
	if o.think < 0 || o.think > hierbench.ThinkMax {
		return nil, fmt.Errorf("--think %v not in [0, %v]", o.think, hierbench.ThinkMax)
	}
	if o.rounds < 1 || o.rounds > HierarchyRoundsMax {
		return nil, fmt.Errorf("--rounds %d not in [1, %d]", o.rounds, HierarchyRoundsMax)
	}
	if len(systems) == 0 || len(o.clients) == 0 {
		return nil, fmt.Errorf("--systems and --clients need at least one value")
	}
	if len(o.clients) > HierarchyClientPointsMax {
		return nil, fmt.Errorf("--clients takes at most %d values", HierarchyClientPointsMax)
	}
	for _, c := range o.clients {
		if c < 1 || c > hierbench.ClientsMax {
			return nil, fmt.Errorf("--clients %d not in [1, %d]", c, hierbench.ClientsMax)
		}
	}
	if err := (hierbench.Keyspace{Objects: o.objects}).Validate(); err != nil {
		return nil, fmt.Errorf("--objects: %w", err)
	}
	if o.disjoint {
		for _, c := range o.clients {
			for _, sh := range o.shares {
				if err := (hierbench.Keyspace{Objects: o.objects}).ValidateDisjoint(c, sh); err != nil {
					return nil, fmt.Errorf("--disjoint: %w", err)
				}
			}
		}
	}
	if o.oneWay < 0 || o.oneWay > HierarchyOneWayDelayMax {
		return nil, fmt.Errorf("--one-way-delay %v not in [0, %v]", o.oneWay, HierarchyOneWayDelayMax)
	}
	if err := o.limits.Validate(); err != nil {
		return nil, err
	}
	if o.rf < 1 || o.rf > hierbench.Nodes {
		return nil, fmt.Errorf("--replication-factor %d not in [1, %d]", o.rf, hierbench.Nodes)
	}
	if o.dbConns < 1 || o.dbConns > HierarchyDBConnsMax {
		return nil, fmt.Errorf("--db-conns %d not in [1, %d]", o.dbConns, HierarchyDBConnsMax)
	}
	if o.loadPar < 1 || o.loadPar > 1024 {
		return nil, fmt.Errorf("--load-parallel %d not in [1, 1024]", o.loadPar)
	}
	if o.runMax <= 0 || o.readyMax <= 0 {
		return nil, fmt.Errorf("--run-max and --ready-max must be positive")
	}
	if o.raftTick < 10*time.Millisecond || o.raftTick > time.Second {
		return nil, fmt.Errorf("--raft-tick %v not in [10ms, 1s]", o.raftTick)
	}
	if o.batchTimeout <= 0 || o.batchTimeout > hierarchy.BatchTimeoutMax || o.batchTimeout%time.Microsecond != 0 {
		return nil, fmt.Errorf("--batch-timeout %v: want whole microseconds in (0, %v]", o.batchTimeout, hierarchy.BatchTimeoutMax)
	}
	return systems, nil
}

func runBenchHierarchy(ctx context.Context, o benchHierarchyOptions, command string) error {
	systems, err := o.validate()
	if err != nil {
		return usageErrorf("%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.runMax)
	defer cancel()
	m := bench.ThisMachine()
	fmt.Printf("canopy bench hierarchy\n  command:  %s\n  machine:  %s\n", command, m)
	fmt.Printf("  workload: %d nodes in this process (replication factor %d, one user range led by each), %d objects of %d bytes; "+
		"transactions of %d updates (read then write), each on a different node (distributed) or all on one node (local), distributed share %v; "+
		"closed-loop clients %v (mean think time %v); one-way delay %v per link; each point %v after %v of warm-up, %d round(s); %s\n\n",
		hierbench.Nodes, o.rf, o.objects, hierbench.ValueBytes, hierbench.UpdatesPerTxn, o.shares, o.clients, o.think, o.oneWay, o.limits.Duration, o.limits.Warmup, o.rounds, o.validationMode())
	// Every system's cluster is started and loaded first; then the points
	// are interleaved (each client count on every system in turn), so that
	// the load of other work on the machine, which drifts over minutes,
	// weighs on the systems alike and their ratios mean something.
	var runs []*hierarchyRun
	defer func() {
		for _, r := range runs {
			r.close()
		}
	}()
	for _, s := range systems {
		r, err := startHierarchySystem(ctx, o, s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		runs = append(runs, r)
	}
	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	defer stopProfile()
	byPoint := make([][]hierbench.Point, len(runs))
	for round := 0; round < o.rounds; round++ {
		for _, n := range o.clients {
			for i, r := range runs {
				for _, share := range o.shares {
					ps, err := r.point(ctx, o, n, share)
					if err != nil {
						return fmt.Errorf("%s at %d clients, distributed share %v: %w", r.system.Name, n, share, err)
					}
					for _, p := range ps {
						p.Round = round
						fmt.Fprintf(os.Stderr, "%s, %d clients, share %.2f, %s: %.1f txn/s, mean %.1f ms, p99 %.1f ms (each phase's own p99, before/body/commit: %.1f/%.1f/%.1f ms)\n",
							r.system.Name, n, share, p.Class, p.Throughput(), hierbench.Ms(p.Mean), hierbench.Ms(p.P99),
							hierbench.Ms(p.P99Before), hierbench.Ms(p.P99Body), hierbench.Ms(p.P99Commit))
						byPoint[i] = append(byPoint[i], p)
					}
				}
			}
		}
	}
	var points []hierbench.Point
	for _, ps := range byPoint {
		points = append(points, ps...)
	}
	axis := hierbench.AxisClients
	switch {
	case len(o.batchSizes) > 0:
		axis = hierbench.AxisBatch
		fmt.Printf("Latency and throughput vs the hierarchy's batch size (thesis figure 4.7; %s)\n", o.validationMode())
	case len(o.shares) > 1 && len(o.clients) == 1:
		axis = hierbench.AxisShare
		fmt.Printf("Local and distributed transactions vs the share of distributed ones (%s)\n", o.validationMode())
	default:
		if o.disjoint {
			fmt.Printf("Throughput and latency vs clients (thesis figures 4.1/4.4, validation off; here %s)\n", o.validationMode())
		} else {
			fmt.Printf("Throughput and latency vs clients (thesis figures 4.8/4.9, validation on; here %s)\n", o.validationMode())
		}
	}
	fmt.Println()
	hierbench.WritePointTable(os.Stdout, points)
	fmt.Printf("%s\n\n", hierbench.PointTableLegend)
	if rs := hierbench.SystemRatios(points); len(rs) > 0 {
		fmt.Printf("Throughput against %s (same clients, share, class and round; the thesis: +23%% and +15%% with validation off, no gain with it on):\n\n", hierbench.Baseline)
		hierbench.WriteSystemRatios(os.Stdout, rs)
		fmt.Println()
	}
	if rs := hierbench.ShareRatios(points); len(rs) > 0 {
		fmt.Println("Local transactions with distributed ones added, against the same system's local transactions at share 0 (same clients, same round):")
		fmt.Println()
		hierbench.WriteShareRatios(os.Stdout, rs, 0.10)
		fmt.Println()
	}
	if end := bench.ThisMachine().LoadAverage; end != "" {
		fmt.Printf("load average at end: %s (at start: %s; %d CPUs)\n", end, m.LoadAverage, m.CPUs)
	}
	if o.out == "" {
		return nil
	}
	if err := hierbench.WriteCSV(o.out+".csv", m.String(), points); err != nil {
		return err
	}
	title := fmt.Sprintf("canopy bench hierarchy: 8 nodes, 8 updates per transaction, %.2f ms one-way delay per link", float64(o.oneWay)/float64(time.Millisecond))
	if err := hierbench.WritePlot(o.out+".png", title, m.String(), points, axis); err != nil {
		return err
	}
	fmt.Printf("wrote %s.csv and %s.png\n", o.out, o.out)
	return nil
}

// validationMode says how the run stands to the thesis's validation
// switch.
func (o benchHierarchyOptions) validationMode() string {
	if o.disjoint {
		return "validation off's stand-in: keys uniform over each client's own objects (--disjoint), no conflicts, checks run but cannot fail"
	}
	return "validation on: keys uniform over all objects, shared by the clients"
}

// point runs one point on r: n clients, a share of distributed
// transactions, the injected delay on for its length only.
func (r *hierarchyRun) point(ctx context.Context, o benchHierarchyOptions, n int, share float64) ([]hierbench.Point, error) {
	// A Raft term change (an election on a starved machine) restarts a
	// range's lease fence, during which its node refuses hierarchy parts
	// (5 s): a point must not start inside one, and one that falls inside
	// the point is reported.
	if w, err := r.waitFences(ctx); err != nil {
		return nil, err
	} else if w > 200*time.Millisecond {
		fmt.Fprintf(os.Stderr, "%s: waited %v for lease fences before the point\n", r.system.Name, w.Round(100*time.Millisecond))
	}
	r.delayer.SetOneWay(o.oneWay)
	before, diagBefore, linksBefore := hierarchySums(r.cluster)
	// Watch the fences while the point runs (warm-up included): the time
	// during which some range refused hierarchy parts.
	var fenced time.Duration
	watchDone, stopWatch := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(fenceWatchInterval):
			}
			if !r.fencesPassed() {
				fenced += fenceWatchInterval
			}
		}
	}()
	ps, err := r.runner.Run(ctx, r.system.Name, n, share, o.limits)
	close(stopWatch)
	<-watchDone
	r.delayer.SetOneWay(0)
	if err != nil {
		return nil, err
	}
	for i := range ps {
		ps[i].Fenced = fenced
	}
	after, diagAfter, linksAfter := hierarchySums(r.cluster)
	for i := range ps {
		ps[i].LinkDelay = linksAfter.mean(linksBefore)
	}
	if d := diagAfter.sub(diagBefore); d != (hierDiag{}) {
		fmt.Fprintf(os.Stderr, "%s at %d clients, share %.2f: %+v\n", r.system.Name, n, share, d)
		for i := range ps {
			ps[i].Resent, ps[i].Forgotten = d.Resent, d.Forgotten
		}
	}
	if fenced > 0 {
		fmt.Fprintf(os.Stderr, "%s at %d clients, share %.2f: some range's lease fence was up for about %v of the point (a lease was lost and taken again)\n", r.system.Name, n, share, fenced)
	}
	if r.system.Batch > 0 {
		// Counted by the validators themselves (warm-up included):
		// messages (parts, votes, decisions, results, watermarks, raises)
		// and steps per transaction decided, both classes together.
		if decided := after.Decided - before.Decided; decided > 0 {
			for i := range ps {
				ps[i].ProtocolMessagesPerTxn = float64(after.Messages()-before.Messages()) / float64(decided)
				ps[i].ProtocolStepsPerTxn = (after.Steps - before.Steps) / float64(decided)
			}
		}
	}
	return ps, nil
}

// fenceWatchInterval is how often a point looks at the lease fences.
const fenceWatchInterval = 200 * time.Millisecond

// fencesPassed reports whether every node takes hierarchy parts on every
// range it leads (kvserver.HierarchyLeaseFence passed in the current
// term); true for the other protocols.
func (r *hierarchyRun) fencesPassed() bool {
	if r.system.Batch == 0 {
		return true
	}
	for i := 0; i < hierbench.Nodes; i++ {
		if !r.cluster.Node(i).HierarchyReady() {
			return false
		}
	}
	return true
}

// waitFences waits until fencesPassed and returns how long that took.
func (r *hierarchyRun) waitFences(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	for !r.fencesPassed() {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return time.Since(start), nil
}

// hierarchyRun is one system's cluster, loaded, and its runner.
type hierarchyRun struct {
	system  hierbench.System
	runner  *hierbench.Runner
	delayer *hierbench.Delayer
	cluster *testcluster.Cluster
	close   func()
}

// startHierarchySystem starts a cluster for s and loads it.
func startHierarchySystem(ctx context.Context, o benchHierarchyOptions, s hierbench.System) (*hierarchyRun, error) {
	fmt.Fprintf(os.Stderr, "%s: starting %d nodes...\n", s.Name, hierbench.Nodes)
	dir := ""
	if o.dir != "" {
		dir = o.dir + "/" + strings.ReplaceAll(s.Name, "/", "-")
	}
	// The hierarchy's systems: s.Batch is their batch size,
	// for votes up the tree and decisions to the nodes alike (the
	// thesis's B), with --batch-timeout. 2pc-locking and default have no
	// batch.
	var hs *rpcpb.HierarchySettings
	if s.Batch > 0 {
		us := uint64(o.batchTimeout / time.Microsecond)
		hs = &rpcpb.HierarchySettings{ValidatorBatchSize: uint32(s.Batch), ValidatorBatchTimeoutUs: us,
			NodeBatchSize: uint32(s.Batch), NodeBatchTimeoutUs: us}
	}
	c, err := testcluster.Start(testcluster.Options{
		Nodes: hierbench.Nodes, InitialRanges: hierbench.Nodes, ReplicationFactor: o.rf, Dir: dir,
		CommitProtocol: string(s.Protocol), Hierarchy: hs, ReadyTimeout: o.readyMax, TickInterval: o.raftTick,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return nil, err
	}
	run := &hierarchyRun{system: s, delayer: &hierbench.Delayer{}, cluster: c}
	var dbs []*client.DB
	run.close = func() {
		for _, db := range dbs {
			_ = db.Close()
		}
		c.Close()
	}
	for i := 0; i < hierbench.Nodes; i++ {
		for j := 0; j < hierbench.Nodes; j++ {
			if i != j {
				c.Node(i).SetLinkFault(c.Node(j).NodeID(), kvserver.LinkFault{Delay: o.oneWay})
			}
		}
	}
	for i := 0; i < o.dbConns; i++ {
		db, err := client.Open(ctx, c.Addrs(), client.WithOptions(client.Options{TxnAttemptsMax: 100}),
			client.WithDialOptions(grpc.WithChainUnaryInterceptor(run.delayer.Interceptor())))
		if err != nil {
			run.close()
			return nil, err
		}
		dbs = append(dbs, db)
	}
	if s.Batch > 0 {
		// A node takes hierarchy parts on a range it leads only once the
		// range's lease fence has passed (kvserver.HierarchyLeaseFence).
		fmt.Fprintf(os.Stderr, "%s: waiting for the validators' lease fences...\n", s.Name)
		if _, err := run.waitFences(ctx); err != nil {
			run.close()
			return nil, err
		}
	}
	k := hierbench.Keyspace{Objects: o.objects}
	start := time.Now()
	fmt.Fprintf(os.Stderr, "%s: loading %d objects...\n", s.Name, o.objects)
	if err := hierbench.Load(ctx, dbs[0], k, o.loadPar, func(n int) {
		fmt.Fprintf(os.Stderr, "\r  %d objects", n)
	}); err != nil {
		run.close()
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "\r%s: loaded in %v\n", s.Name, time.Since(start).Round(time.Second))
	if o.compact {
		start := time.Now()
		for i := 0; i < hierbench.Nodes; i++ {
			fmt.Fprintf(os.Stderr, "\r%s: compacting store %d of %d...", s.Name, i+1, hierbench.Nodes)
			if err := compactStore(ctx, c.Node(i).Engine()); err != nil {
				run.close()
				return nil, fmt.Errorf("compacting n%d's store: %w", c.Node(i).NodeID(), err)
			}
		}
		fmt.Fprintf(os.Stderr, "\r%s: compacted in %v          \n", s.Name, time.Since(start).Round(time.Second))
	}
	run.runner = &hierbench.Runner{DBs: dbs, Delayer: run.delayer, Keys: k, Seed: o.seed, Disjoint: o.disjoint, Think: o.think}
	return run, nil
}

// hierDiag is what the hierarchy's nodes count of their recoveries: votes
// resent by leaves waiting for a decision, transactions inner validators
// forgot, parts refused, messages dropped, transactions aborted for age.
type hierDiag struct{ Resent, Forgotten, Refused, Dropped, AgedAborts int64 }

func (d hierDiag) sub(e hierDiag) hierDiag {
	return hierDiag{d.Resent - e.Resent, d.Forgotten - e.Forgotten, d.Refused - e.Refused, d.Dropped - e.Dropped, d.AgedAborts - e.AgedAborts}
}

// hierarchySums sums, in one look at each node's hierarchy status, the
// validators' counts (zero for the other protocols), hierDiag, and the
// validator links' delayed batches and the time they were held in fact
// over the cluster's nodes.
func hierarchySums(c *testcluster.Cluster) (hierarchy.Counts, hierDiag, linkHeld) {
	var sum hierarchy.Counts
	var d hierDiag
	var l linkHeld
	for i := range c.Addrs() {
		if n := c.Node(i); n != nil {
			st := n.HierarchyStatus()
			d.Dropped += st.Dropped
			d.AgedAborts += st.AgedAborts
			l.batches += st.DelayedBatches
			l.held += st.DelayedHeld
			for _, v := range st.Validators {
				sum = sum.Add(v.Counts)
			}
		}
	}
	d.Resent, d.Forgotten, d.Refused = int64(sum.Resent), int64(sum.Forgotten), int64(sum.Refused)
	return sum, d, l
}

// linkHeld is what the validator links held for the injected delay:
// batches, and the time they were held in fact.
type linkHeld struct {
	batches int64
	held    time.Duration
}

// mean is the realized one-way delay of the batches held since before (0
// if none).
func (l linkHeld) mean(before linkHeld) time.Duration {
	if n := l.batches - before.batches; n > 0 {
		return (l.held - before.held) / time.Duration(n)
	}
	return 0
}

// compactStore flushes eng's memtable and compacts its whole key space into
// the bottom level.
func compactStore(ctx context.Context, eng *storage.Engine) error {
	db := eng.DB()
	if err := db.Flush(); err != nil {
		return err
	}
	return db.Compact(ctx, []byte{}, bytes.Repeat([]byte{0xff}, 16), true)
}
