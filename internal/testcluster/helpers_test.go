package testcluster_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// Deadlines of the liveness waits. None decides a pass: each only bounds
// how long a test waits for something that must eventually happen before
// it fails with a message saying what did not happen.
const (
	// setupDeadline bounds starting a cluster, opening clients and loading
	// initial data.
	setupDeadline = 90 * time.Second
	// opDeadline bounds one client operation or transaction (with its
	// retries) during a workload with faults.
	opDeadline = 30 * time.Second
	// progressDeadline is how long a workload may go without completing
	// any operation before the test fails as stuck.
	progressDeadline = 60 * time.Second
	// convergeDeadline bounds the wait for replicas to reach one applied
	// index after the workload stopped (I5 check).
	convergeDeadline = 60 * time.Second
)

// testSeed returns the seed of a test's randomized parts: CANOPY_SEED if
// set, else the clock. It is logged so that a failure can be replayed (the
// workload's choices replay; the cluster's timing does not).
func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CANOPY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CANOPY_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (rerun with CANOPY_SEED=%d)", seed, seed)
	return seed
}

// startCluster starts a cluster in t's temporary directory and closes it
// when t ends.
func startCluster(t *testing.T, o testcluster.Options) *testcluster.Cluster {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	start := time.Now()
	c, err := testcluster.Start(o)
	if err != nil {
		t.Fatalf("starting cluster: %v", err)
	}
	t.Cleanup(c.Close)
	t.Logf("cluster of %d nodes up in %v: %v", len(c.Addrs()), time.Since(start).Round(time.Millisecond), c.Addrs())
	return c
}

// openDB opens a client on every node's address and closes it when t
// ends.
func openDB(t *testing.T, c *testcluster.Cluster, opts ...client.Option) *client.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupDeadline)
	defer cancel()
	db, err := client.Open(ctx, c.Addrs(), opts...)
	if err != nil {
		t.Fatalf("opening client: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// workloadRPCTimeout bounds one RPC attempt of the workloads' clients
// (client.Options.RPCTimeout, default 10s). Shorter than the nodes' own
// request timeout (10s), so that a request stuck on a partitioned
// leaseholder is abandoned by the client, which exercises its handling of
// timed-out attempts (ambiguous writes, resends, status lookups) and keeps
// the partition tests short.
const workloadRPCTimeout = 2 * time.Second

// openWorkloadDB opens a workload client: openDB with RPCTimeout
// workloadRPCTimeout, then mod applied.
func openWorkloadDB(t *testing.T, c *testcluster.Cluster, mod ...func(*client.Options)) *client.DB {
	t.Helper()
	o := client.Options{RPCTimeout: workloadRPCTimeout}
	for _, f := range mod {
		f(&o)
	}
	return openDB(t, c, client.WithOptions(o))
}

// busiestRange returns the range that holds the most of ks (logical user
// keys) and the 0-based index of its leaseholder, as the meta range
// reports it (falling back on the node that says it leads the range). It
// may run outside the test's goroutine, so it returns errors rather than
// failing the test.
func busiestRange(ctx context.Context, db *client.DB, c *testcluster.Cluster, ks [][]byte) (rangeID uint64, node int, err error) {
	ranges, err := db.Ranges(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("listing ranges: %w", err)
	}
	best, bestCount := -1, 0
	for i, r := range ranges {
		n := 0
		for _, k := range ks {
			uk := keys.UserKey(k)
			if bytes.Compare(r.Desc.GetStartKey(), uk) <= 0 && bytes.Compare(uk, r.Desc.GetEndKey()) < 0 {
				n++
			}
		}
		if n > bestCount {
			best, bestCount = i, n
		}
	}
	if best < 0 {
		return 0, 0, fmt.Errorf("no range holds any of the %d keys", len(ks))
	}
	r := ranges[best]
	rangeID = r.Desc.GetRangeId()
	if r.LeaseholderNodeID != 0 {
		return rangeID, int(r.LeaseholderNodeID) - 1, nil
	}
	// The lookup did not know the leaseholder: ask the nodes.
	for ctx.Err() == nil {
		if i := c.LeaderOf(rangeID); i >= 0 {
			return rangeID, i, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, 0, fmt.Errorf("range %d has no leader: %w", rangeID, ctx.Err())
}

// leaseholderPicker returns a nemesis pick function that chooses the
// leaseholder of the range holding the most of ks.
func leaseholderPicker(t *testing.T, db *client.DB, c *testcluster.Cluster, ks [][]byte) func() int {
	return func() int {
		ctx, cancel := context.WithTimeout(context.Background(), setupDeadline)
		defer cancel()
		rid, node, err := busiestRange(ctx, db, c, ks)
		if err != nil {
			t.Errorf("finding the node to stop: %v; stopping n1", err)
			return 0
		}
		t.Logf("nemesis: chose n%d, leaseholder of range %d (the busiest of the workload's keys)", node+1, rid)
		return node
	}
}

// fault is what a nemesis injects: inject starts it and returns what it
// did and the function that ends it.
type fault func() (desc string, heal func() (string, error))

// killFault stops the node pick chooses (when the time comes) and
// restarts it from its store when healed.
func killFault(c *testcluster.Cluster, pick func() int) fault {
	return func() (string, func() (string, error)) {
		i := pick()
		c.StopNode(i)
		return fmt.Sprintf("stopped n%d", i+1), func() (string, error) {
			return fmt.Sprintf("restarted n%d", i+1), c.RestartNode(i)
		}
	}
}

// partitionFault cuts every Raft link of the node pick chooses, in both
// directions (its transport drops what it sends to the others, theirs drop
// what they send to it), and restores them when healed. Client connections
// to the node are not cut: clients keep sending it requests, which it must
// not serve from a stale view.
func partitionFault(c *testcluster.Cluster, pick func() int) fault {
	return func() (string, func() (string, error)) {
		i := pick()
		setLinks(c, i, kvserver.LinkFault{Drop: true})
		return fmt.Sprintf("partitioned n%d", i+1), func() (string, error) {
			setLinks(c, i, kvserver.LinkFault{})
			return fmt.Sprintf("healed the partition of n%d", i+1), nil
		}
	}
}

// setLinks sets f on every Raft link of node i, both ways.
func setLinks(c *testcluster.Cluster, i int, f kvserver.LinkFault) {
	for j := range c.Addrs() {
		if j == i {
			continue
		}
		if n := c.Node(i); n != nil {
			n.SetLinkFault(uint64(j+1), f)
		}
		if n := c.Node(j); n != nil {
			n.SetLinkFault(uint64(i+1), f)
		}
	}
}

// rangeLeaderPicker returns a nemesis pick function that chooses the
// node leading rangeID when the time comes.
func rangeLeaderPicker(t *testing.T, c *testcluster.Cluster, rangeID uint64, what string) func() int {
	return func() int {
		deadline := time.Now().Add(setupDeadline)
		for time.Now().Before(deadline) {
			if i := c.LeaderOf(rangeID); i >= 0 {
				t.Logf("nemesis: chose n%d, leader of range %d (%s)", i+1, rangeID, what)
				return i
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("range %d has no leader after %v; choosing n1", rangeID, setupDeadline)
		return 0
	}
}

// delayFault delays every Raft message to and from the node pick chooses
// by delay (a slow node), and removes the delay when healed.
func delayFault(c *testcluster.Cluster, pick func() int, delay time.Duration) fault {
	return func() (string, func() (string, error)) {
		i := pick()
		setLinks(c, i, kvserver.LinkFault{Delay: delay})
		return fmt.Sprintf("slowed every Raft link of n%d by %v", i+1, delay), func() (string, error) {
			setLinks(c, i, kvserver.LinkFault{})
			return fmt.Sprintf("removed the delay on n%d", i+1), nil
		}
	}
}

// splitFault splits the range holding key at key (through db) while the
// workload runs: clients must follow the new descriptors, and intents,
// reads to refresh and status records must survive the split. It has
// nothing to heal. A split that fails is reported through the returned
// description and fails the test at heal time.
func splitFault(t *testing.T, db *client.DB, key []byte) fault {
	return func() (string, func() (string, error)) {
		ctx, cancel := context.WithTimeout(context.Background(), setupDeadline)
		defer cancel()
		err := db.Split(ctx, key)
		desc := fmt.Sprintf("split at %q", key)
		if err != nil {
			desc += fmt.Sprintf(" failed: %v", err)
		}
		return desc, func() (string, error) {
			if err != nil {
				return "split check", fmt.Errorf("split at %q: %w", key, err)
			}
			return fmt.Sprintf("(split at %q done)", key), nil
		}
	}
}

// nemesis injects faults one after another while a workload runs, by
// progress, not time: with m faults, fault j is injected once (2j+1)/(2m+1)
// of the workload's operations have completed and healed at (2j+2)/(2m+1).
// With one fault: on after a third, healed after two thirds. The workload
// reports each completed operation with done.
type nemesis struct {
	t      *testing.T
	total  int64
	faults []fault
	// steps, if not nil, overrides the even spacing: fault j is injected
	// at progress steps[2j] and healed at steps[2j+1].
	steps []int64
	wake  chan struct{}
	wg    sync.WaitGroup
	start time.Time

	progress atomic.Int64

	mu struct {
		sync.Mutex
		// step counts injections and heals done: fault step/2 is on when
		// step is odd. Invariant: step <= 2*len(faults).
		step     int
		finished bool
		heal     func() (string, error)
		events   []string
		err      error
	}
}

// startNemesis starts the nemesis goroutine for a workload of total
// operations.
func startNemesis(t *testing.T, total int, faults ...fault) *nemesis {
	return startNemesisAt(t, total, nil, faults...)
}

// startNemesisAt is startNemesis with the progress of each step given:
// fault j is injected at steps[2j] and healed at steps[2j+1].
func startNemesisAt(t *testing.T, total int, steps []int64, faults ...fault) *nemesis {
	if steps != nil && len(steps) != 2*len(faults) {
		t.Fatalf("nemesis: %d steps for %d faults", len(steps), len(faults))
	}
	n := &nemesis{t: t, total: int64(total), faults: faults, steps: steps, wake: make(chan struct{}, 1), start: time.Now()}
	n.wg.Add(1)
	go n.run()
	return n
}

// done reports one completed operation (successful or not).
func (n *nemesis) done() {
	n.progress.Add(1)
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *nemesis) eventLocked(format string, args ...any) {
	n.mu.events = append(n.mu.events, fmt.Sprintf("%v: ", time.Since(n.start).Round(time.Millisecond))+fmt.Sprintf(format, args...))
}

// threshold is the progress at which step s (0-based) is due.
func (n *nemesis) threshold(s int) int64 {
	if n.steps != nil {
		return n.steps[s]
	}
	return int64(s+1) * n.total / int64(2*len(n.faults)+1)
}

func (n *nemesis) run() {
	defer n.wg.Done()
	for range n.wake {
		for {
			p := n.progress.Load()
			n.mu.Lock()
			step, finished := n.mu.step, n.mu.finished
			n.mu.Unlock()
			if finished || step >= 2*len(n.faults) || p < n.threshold(step) {
				break
			}
			if step%2 == 1 {
				n.healNow(p)
				continue
			}
			// Injecting may take a while (finding a leaseholder); the lock
			// is not held meanwhile, so finish may run: it then finds the
			// step unchanged and this heals at once.
			desc, heal := n.faults[step/2]()
			n.mu.Lock()
			n.eventLocked("%s after %d/%d operations", desc, p, n.total)
			n.mu.step++
			n.mu.heal = heal
			n.mu.Unlock()
		}
	}
}

// healNow ends the fault that is on, if any.
func (n *nemesis) healNow(p int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.step%2 == 0 {
		return
	}
	desc, err := n.mu.heal()
	n.eventLocked("%s after %d/%d operations", desc, p, n.total)
	if err != nil && n.mu.err == nil {
		n.mu.err = fmt.Errorf("%s: %w", desc, err)
	}
	n.mu.step++
}

// finish ends the nemesis once the workload is over, healing a fault that
// is still on. It logs the events and fails the test if healing failed or
// not every fault was injected.
func (n *nemesis) finish() {
	n.t.Helper()
	n.mu.Lock()
	n.mu.finished = true
	n.mu.Unlock()
	close(n.wake)
	n.wg.Wait()
	n.healNow(n.progress.Load())
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range n.mu.events {
		n.t.Log("nemesis: " + e)
	}
	if injected := (n.mu.step + 1) / 2; injected < len(n.faults) {
		n.t.Errorf("the nemesis injected %d of its %d faults (%d of %d operations reported)", injected, len(n.faults), n.progress.Load(), n.total)
	}
	if n.mu.err != nil {
		n.t.Fatalf("nemesis: %v", n.mu.err)
	}
}

// watchProgress fails the test if count stops moving for progressDeadline
// before stop is closed. It is the only clock-based judgement in these
// tests, and only of liveness: a minute without one completed operation.
func watchProgress(t *testing.T, what string, count func() int64, stop <-chan struct{}) {
	last, lastAt := count(), time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if c := count(); c != last {
			last, lastAt = c, time.Now()
			continue
		}
		if time.Since(lastAt) > progressDeadline {
			t.Errorf("%s: no operation completed for %v (stuck at %d)", what, progressDeadline, last)
			return
		}
	}
}

// checkReplicas checks invariant I5 once the workload has stopped.
func checkReplicas(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), convergeDeadline)
	defer cancel()
	start := time.Now()
	n, err := c.CheckReplicas(ctx)
	if err != nil {
		t.Fatalf("I5: %v", err)
	}
	t.Logf("I5: the replicas of all %d ranges hold the same data at the same applied index (converged in %v)", n, time.Since(start).Round(time.Millisecond))
}
