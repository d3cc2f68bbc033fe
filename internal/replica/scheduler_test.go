package replica

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/storage"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.etcd.io/raft/v3/raftpb"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized scheduler tests (0: a new one)")

func testSeed(t *testing.T) uint64 {
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -seed %d)", seed, seed)
	return seed
}

// multiNet routes the messages of many ranges between replicas on many
// nodes, in memory.
type multiNet struct {
	mu       sync.Mutex
	replicas map[[2]uint64]*Replica // by (range, node)
}

func newMultiNet() *multiNet { return &multiNet{replicas: map[[2]uint64]*Replica{}} }

func (n *multiNet) Send(rangeID uint64, msgs []raftpb.Message) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range msgs {
		if r := n.replicas[[2]uint64{rangeID, m.To}]; r != nil {
			r.Step(m)
		} else if from := n.replicas[[2]uint64{rangeID, m.From}]; from != nil {
			from.ReportUnreachable(m.To)
			if m.Type == raftpb.MsgSnap {
				from.ReportSnapshotFailure(m.To)
			}
		}
	}
}

func (n *multiNet) set(rangeID, nodeID uint64, r *Replica) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if r == nil {
		delete(n.replicas, [2]uint64{rangeID, nodeID})
	} else {
		n.replicas[[2]uint64{rangeID, nodeID}] = r
	}
}

func (n *multiNet) get(rangeID, nodeID uint64) *Replica {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.replicas[[2]uint64{rangeID, nodeID}]
}

func (n *multiNet) all() []*Replica {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]*Replica, 0, len(n.replicas))
	for _, r := range n.replicas {
		out = append(out, r)
	}
	return out
}

// ticker ticks every replica of net every interval until stop is closed.
func ticker(net *multiNet, interval time.Duration, stop chan struct{}, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				for _, r := range net.all() {
					r.Tick()
				}
			}
		}
	}()
}

// initRanges writes the initial Raft state of ranges 1..ranges, with the
// given voters, into eng.
func initRanges(t *testing.T, eng *storage.Engine, ranges int, voters []uint64) {
	b := eng.NewWriteBatch()
	defer b.Close()
	for id := uint64(1); id <= uint64(ranges); id++ {
		if err := WriteInitialState(b, id, voters, raftpb.HardState{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
}

func startReplica(t *testing.T, net *multiNet, eng *storage.Engine, s *Scheduler, rangeID, nodeID uint64) *Replica {
	r, err := New(Config{RangeID: rangeID, PeerID: nodeID, Engine: eng, SM: kvSM{}, Transport: net, Scheduler: s})
	if err != nil {
		t.Fatal(err)
	}
	net.set(rangeID, nodeID, r)
	r.Start()
	return r
}

// waitFor waits for cond (a liveness wait, not an assertion on time).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (s *Scheduler) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.queue) == 0 && s.mu.processing == 0
}

func (r *Replica) queuedProposals() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.mu.props)
}

// TestSchedulerGroupCommit: proposals to eight ranges that wait in the
// queue while the only worker is busy go to disk in one batch with one
// sync. Single-voter ranges and no ticks, so that nothing else syncs.
func TestSchedulerGroupCommit(t *testing.T) {
	const ranges = 8
	eng, err := storage.Open(t.TempDir(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	s, err := NewScheduler(SchedulerConfig{Engine: eng, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	initRanges(t, eng, ranges+1, []uint64{1})
	net := newMultiNet()
	var reps []*Replica
	for id := uint64(1); id <= ranges+1; id++ {
		r := startReplica(t, net, eng, s, id, 1)
		defer r.Stop()
		r.Campaign()
		reps = append(reps, r)
	}
	for _, r := range reps {
		waitFor(t, fmt.Sprintf("r%d leaseholder", r.RangeID()), func() bool { return r.Status().Leaseholder })
	}
	waitFor(t, "an idle scheduler", s.idle)

	// Hold the worker in a round of the last range, queue a proposal on
	// each of the others, then let it go.
	var armed atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	var roundSizes []int
	var sizesMu sync.Mutex
	s.testingRoundHook = func(batch []*Replica) {
		sizesMu.Lock()
		roundSizes = append(roundSizes, len(batch))
		sizesMu.Unlock()
		if armed.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-release
		}
	}
	armed.Store(true)
	reps[ranges].Tick()
	<-entered
	before := s.Metrics()
	sizesMu.Lock()
	roundSizes = nil
	sizesMu.Unlock()
	var wg sync.WaitGroup
	errs := make(chan error, ranges)
	for _, r := range reps[:ranges] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.Propose(context.Background(), []byte(fmt.Sprintf("g%d=v", r.RangeID())))
			errs <- err
		}()
	}
	for _, r := range reps[:ranges] {
		waitFor(t, "a queued proposal", func() bool { return r.queuedProposals() == 1 })
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "an idle scheduler", s.idle)
	after := s.Metrics()
	sizesMu.Lock()
	defer sizesMu.Unlock()
	if syncs, synced := after.Syncs-before.Syncs, after.RangesSynced-before.RangesSynced; syncs != 1 || synced != ranges {
		t.Fatalf("%d proposals on %d ranges took %d syncs for %d ranges (rounds of %v), want 1 sync for %d", ranges, ranges, syncs, synced, roundSizes, ranges)
	}
}

// TestSchedulerOneWorkerPerReplica hammers many replicas on many workers
// with every kind of work and checks that no replica is ever in two rounds
// at once (the scheduler also panics if it were), and that every
// proposal's finished callback runs exactly once, whatever its outcome:
// applied, dropped, ambiguous after its context ended, or failed by Stop.
// Run it with -race.
func TestSchedulerOneWorkerPerReplica(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	const ranges = 16
	eng, err := storage.Open(t.TempDir(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	s, err := NewScheduler(SchedulerConfig{Engine: eng, Workers: 8, BatchRangesMax: 1 + rng.IntN(4)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var inRound [ranges + 1]atomic.Int32
	var overlaps atomic.Int32
	s.testingRoundHook = func(batch []*Replica) {
		for _, r := range batch {
			if r.workers.Load() != 1 {
				overlaps.Add(1)
			}
			if inRound[r.RangeID()].Add(1) != 1 {
				overlaps.Add(1)
			}
		}
		// Widen the window in which another worker could take them.
		time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
		for _, r := range batch {
			inRound[r.RangeID()].Add(-1)
		}
	}
	initRanges(t, eng, ranges, []uint64{1})
	net := newMultiNet()
	stop := make(chan struct{})
	var bg sync.WaitGroup
	ticker(net, 5*time.Millisecond, stop, &bg)
	var reps []*Replica
	for id := uint64(1); id <= ranges; id++ {
		r := startReplica(t, net, eng, s, id, 1)
		r.Campaign()
		reps = append(reps, r)
	}
	for _, r := range reps {
		waitFor(t, fmt.Sprintf("r%d leaseholder", r.RangeID()), func() bool { return r.Status().Leaseholder })
	}
	const proposers, perProposer = 8, 100
	finished := make([][]atomic.Int32, proposers)
	var applied, done atomic.Int32
	var wg sync.WaitGroup
	for g := 0; g < proposers; g++ {
		finished[g] = make([]atomic.Int32, perProposer)
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			prng := rand.New(rand.NewPCG(seed, uint64(g)+100))
			for i := 0; i < perProposer; i++ {
				r := reps[prng.IntN(ranges)]
				switch prng.IntN(4) {
				case 0:
					r.Campaign()
				case 1:
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_ = r.ReadIndex(ctx)
					cancel()
				}
				timeout := time.Second
				if prng.IntN(4) == 0 {
					timeout = time.Duration(prng.IntN(500)) * time.Microsecond
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				if _, err := r.ProposeEvaluated(ctx, []byte(fmt.Sprintf("p%d-%d=v", g, i)), 0, func(any, error) { finished[g][i].Add(1) }); err == nil {
					applied.Add(1)
				}
				cancel()
				done.Add(1)
			}
		}(g)
	}
	// Stop half the replicas while the proposers run.
	waitFor(t, "half the proposals", func() bool { return done.Load() >= proposers*perProposer/2 })
	for _, r := range reps[:ranges/2] {
		r.Stop()
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	for _, r := range reps[ranges/2:] {
		r.Stop()
	}
	if applied.Load() == 0 {
		t.Fatal("no proposal applied")
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("a replica was in two rounds at once %d times", n)
	}
	for g := range finished {
		for i := range finished[g] {
			if n := finished[g][i].Load(); n != 1 {
				t.Fatalf("proposal %d-%d: finished called %d times, want 1", g, i, n)
			}
		}
	}
	t.Logf("%d of %d proposals applied; metrics %+v", applied.Load(), proposers*perProposer, s.Metrics())
}

// TestCrashGroupCommit: three nodes on one crashable in-memory file
// system, each with one scheduler for its replicas of eight ranges,
// take proposals from concurrent clients; at a random moment every node
// crashes at once (the file system keeps what was synced and, at random,
// some of what was not). Restarted from that state, every range must hold
// every proposal acknowledged before the crash (I2), on every replica once
// they catch up (I5). Group commits, leaders sending appends before their
// own sync, and a random scheduler configuration per node are all in play.
func TestCrashGroupCommit(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	const ranges, nodes = 8, 3
	voters := []uint64{1, 2, 3}
	fs := vfs.NewCrashableMem()
	dir := func(node uint64) string { return fmt.Sprintf("n%d", node) }
	schedCfg := make([]SchedulerConfig, nodes+1)
	for node := uint64(1); node <= nodes; node++ {
		schedCfg[node] = SchedulerConfig{Workers: 1 + rng.IntN(4), BatchRangesMax: 1 + rng.IntN(16)}
	}
	unsyncedPercent := []int{0, 0, 30, 70}[rng.IntN(4)]
	ackedBeforeCrash := 50 + rng.IntN(250)
	t.Logf("schedulers %+v; crash after %d acknowledgements, keeping %d%% of unsynced data", schedCfg[1:], ackedBeforeCrash, unsyncedPercent)

	type node struct {
		eng   *storage.Engine
		sched *Scheduler
	}
	// Slow group commits down at random, so that more happens while a
	// node's state is not yet durable (a leader's appends are out; are its
	// followers' acknowledgements?).
	slowCommits := func() {
		if rand.IntN(4) == 0 {
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		}
	}
	start := func(fs vfs.FS, net *multiNet, init bool, campaign func(rid uint64) uint64) []node {
		ns := make([]node, nodes+1)
		for id := uint64(1); id <= nodes; id++ {
			eng, err := storage.Open(dir(id), storage.Options{FS: fs})
			if err != nil {
				t.Fatalf("seed %d: open n%d: %v", seed, id, err)
			}
			if init {
				initRanges(t, eng, ranges, voters)
			}
			cfg := schedCfg[id]
			cfg.Engine = eng
			s, err := NewScheduler(cfg)
			if err != nil {
				t.Fatal(err)
			}
			s.testingCommitHook = slowCommits
			ns[id] = node{eng, s}
			for rid := uint64(1); rid <= ranges; rid++ {
				startReplica(t, net, eng, s, rid, id)
			}
		}
		for rid := uint64(1); rid <= ranges; rid++ {
			net.get(rid, campaign(rid)).Campaign()
		}
		return ns
	}
	stopAll := func(net *multiNet, ns []node) {
		for _, r := range net.all() {
			r.Stop()
		}
		for _, n := range ns[1:] {
			n.sched.Close()
			if err := n.eng.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	leader := func(net *multiNet, rid uint64) *Replica {
		for id := uint64(1); id <= nodes; id++ {
			if r := net.get(rid, id); r != nil && r.Status().IsLeader {
				return r
			}
		}
		return nil
	}

	// Before the crash.
	net := newMultiNet()
	ns := start(fs, net, true, func(rid uint64) uint64 { return rid%nodes + 1 })
	stop := make(chan struct{})
	var bg sync.WaitGroup
	ticker(net, 5*time.Millisecond, stop, &bg)
	var crashed atomic.Bool
	var crashOnce sync.Once
	var crashFS *vfs.MemFS
	var mu sync.Mutex
	acked := map[uint64][]string{} // range -> keys acknowledged before the crash
	nAcked := 0
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			prng := rand.New(rand.NewPCG(seed, uint64(g)+1000))
			for i := 0; !crashed.Load(); i++ {
				rid := 1 + uint64(prng.IntN(ranges))
				r := leader(net, rid)
				if r == nil {
					time.Sleep(time.Millisecond)
					continue
				}
				key := fmt.Sprintf("r%d/c%d/%d", rid, g, i)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := r.Propose(ctx, []byte(key+"=v"))
				cancel()
				if err != nil {
					continue
				}
				// Acknowledged. It counts only if the crash has not begun:
				// the flag is set before the file system is cloned, so a
				// proposal that still sees it unset was synced before.
				if crashed.Load() {
					return
				}
				mu.Lock()
				acked[rid] = append(acked[rid], key)
				nAcked++
				if nAcked == ackedBeforeCrash {
					crashOnce.Do(func() {
						crashed.Store(true)
						crashFS = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsyncedPercent, RNG: rand.New(rand.NewPCG(seed, 3))})
					})
				}
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	stopAll(net, ns)
	m := make([]SchedulerMetrics, 0, nodes)
	for _, n := range ns[1:] {
		m = append(m, n.sched.Metrics())
	}
	t.Logf("before the crash: %d acknowledged; scheduler metrics %+v", nAcked, m)

	// After the crash: every range commits one more entry through a leader
	// of the new term, which applies all that the log holds, on every
	// replica.
	net = newMultiNet()
	// Any node may campaign first: the election, not the old leader's
	// head start, must keep what was acknowledged.
	ns = start(crashFS, net, false, func(uint64) uint64 { return 1 + uint64(rng.IntN(nodes)) })
	stop = make(chan struct{})
	ticker(net, 5*time.Millisecond, stop, &bg)
	defer func() {
		close(stop)
		bg.Wait()
		stopAll(net, ns)
	}()
	for rid := uint64(1); rid <= ranges; rid++ {
		var index uint64
		waitFor(t, fmt.Sprintf("seed %d: a write to r%d after restart", seed, rid), func() bool {
			r := leader(net, rid)
			if r == nil {
				return false
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			res, err := r.Propose(ctx, []byte(fmt.Sprintf("r%d/after=v", rid)))
			if err != nil {
				return false
			}
			index = res.(uint64)
			return true
		})
		for id := uint64(1); id <= nodes; id++ {
			r := net.get(rid, id)
			waitFor(t, fmt.Sprintf("seed %d: r%d on n%d applies %d", seed, rid, id, index), func() bool { return r.Status().Applied >= index })
			for _, key := range acked[rid] {
				if _, err := ns[id].eng.Get(storage.DataKey([]byte(key))); err != nil {
					if errors.Is(err, storage.ErrNotFound) {
						t.Fatalf("seed %d: r%d on n%d lost %q, acknowledged before the crash", seed, rid, id, key)
					}
					t.Fatal(err)
				}
			}
		}
	}
}
