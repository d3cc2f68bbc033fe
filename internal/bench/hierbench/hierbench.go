package hierbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench/kvbench"
)

// Limits of the workload.
const (
	// Nodes is the number of data nodes, and of user ranges (one per node).
	Nodes = 8
	// UpdatesPerTxn: each transaction reads then writes one object on
	// each of this many nodes (all of them, as in the thesis).
	UpdatesPerTxn = 8
	// ValueBytes is the size of every object.
	ValueBytes = 1000
	// ObjectsMax bounds --objects (the thesis's 800,000).
	ObjectsMax = 800_000
	// ClientsMax bounds the closed-loop clients of one point.
	ClientsMax = 1000
	// BatchMax bounds the batch size of a hierarchy system named
	// "<protocol>/b<N>" (hierarchy.BatchSizeMaxMax allows more; the
	// thesis's figure 4.7 goes to 100).
	BatchMax = 1000
)

// System is one system under test.
type System struct {
	// Name is what tables and plots call it, e.g. "2pc-locking",
	// "hierarchy-locking/b10".
	Name string
	// Protocol is the cluster's commit protocol.
	Protocol client.Protocol
	// Batch is the hierarchy's batch size (validator-to-validator and
	// validator-to-node messages), 0 for the other protocols.
	Batch int
	// Built reports whether the system can run in this build (all are,
	// since the hierarchy protocols exist).
	Built bool
}

// isHierarchy reports whether p is one of the hierarchy protocols (the
// systems with a batch size).
func isHierarchy(p client.Protocol) bool {
	return p == client.ProtocolHierarchyLocking || p == client.ProtocolHierarchyTimestamps
}

// Systems returns every system of the thesis's 4.2.1 and Canopy's default
// protocol, in the order tables list them.
func Systems() []System {
	out := []System{
		{Name: "2pc-locking", Protocol: client.Protocol2PCLocking, Built: true},
		{Name: "default", Protocol: client.ProtocolDefault, Built: true},
	}
	for _, p := range []client.Protocol{client.ProtocolHierarchyLocking, client.ProtocolHierarchyTimestamps} {
		for _, b := range []int{1, 10, 50} {
			out = append(out, System{Name: fmt.Sprintf("%s/b%d", p, b), Protocol: p, Batch: b, Built: true})
		}
	}
	return out
}

// SystemByName returns the system called name: one of Systems, or a
// hierarchy protocol with any batch size in [1, BatchMax], e.g.
// "hierarchy-locking/b25".
func SystemByName(name string) (System, bool) {
	for _, s := range Systems() {
		if s.Name == name {
			return s, true
		}
	}
	proto, b, ok := strings.Cut(name, "/b")
	if !ok {
		return System{}, false
	}
	p := client.Protocol(proto)
	if !isHierarchy(p) {
		return System{}, false
	}
	n, err := strconv.Atoi(b)
	if err != nil || n < 1 || n > BatchMax || strconv.Itoa(n) != b {
		return System{}, false
	}
	return System{Name: name, Protocol: p, Batch: n, Built: true}, true
}

// ExpandSystems reads the names of --systems. Without batches, each is a
// name SystemByName knows. With batches (a batch-size sweep, the thesis's
// figure 4.7), each hierarchy system, named by its protocol alone
// ("hierarchy-locking") or with a batch ("hierarchy-locking/b10", whose
// batch is then ignored), becomes one system per batch size, in the order
// of batches; the other systems are kept as they are. A system named twice
// is an error.
func ExpandSystems(names []string, batches []int) ([]System, error) {
	for _, b := range batches {
		if b < 1 || b > BatchMax {
			return nil, fmt.Errorf("hierbench: batch size %d not in [1, %d]", b, BatchMax)
		}
	}
	var out []System
	seen := map[string]bool{}
	add := func(s System) error {
		if seen[s.Name] {
			return fmt.Errorf("hierbench: system %s named twice", s.Name)
		}
		seen[s.Name] = true
		out = append(out, s)
		return nil
	}
	for _, name := range names {
		proto, _, _ := strings.Cut(name, "/b")
		p := client.Protocol(proto)
		if isHierarchy(p) && len(batches) > 0 {
			for _, b := range batches {
				s, _ := SystemByName(fmt.Sprintf("%s/b%d", p, b))
				if err := add(s); err != nil {
					return nil, err
				}
			}
			continue
		}
		s, ok := SystemByName(name)
		if !ok {
			if isHierarchy(p) && name == proto {
				return nil, fmt.Errorf("hierbench: system %q needs a batch (%s/b10) or a batch-size sweep", name, name)
			}
			return nil, fmt.Errorf("hierbench: unknown system %q (%s, or a hierarchy protocol with /b1 to /b%d)", name, Names(), BatchMax)
		}
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Keyspace is the objects: Objects in all, spread evenly over the Nodes
// user ranges (the keyspace is split at byte i*256/Nodes, so object j of
// node i is the key {i*256/Nodes, 'o', j as 4 bytes big endian}).
type Keyspace struct {
	Objects int
}

// Validate checks the bounds.
func (k Keyspace) Validate() error {
	if k.Objects < Nodes || k.Objects > ObjectsMax {
		return fmt.Errorf("hierbench: %d objects: want [%d, %d]", k.Objects, Nodes, ObjectsMax)
	}
	return nil
}

// PerNode is the number of objects on each node.
func (k Keyspace) PerNode() int { return k.Objects / Nodes }

// Key returns object j of node i.
func (k Keyspace) Key(i, j int) []byte {
	b := []byte{byte(i * 256 / Nodes), 'o'}
	return binary.BigEndian.AppendUint32(b, uint32(j))
}

// Load writes every object (ValueBytes each) with non-transactional puts,
// parallel writers at a time; progress, if not nil, is called now and
// then with the objects written so far.
func Load(ctx context.Context, db *client.DB, k Keyspace, parallel int, progress func(done int)) error {
	if err := k.Validate(); err != nil {
		return err
	}
	var next, done atomic.Int64
	total := int64(k.PerNode() * Nodes)
	errc := make(chan error, parallel)
	var wg sync.WaitGroup
	for w := 0; w < parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := make([]byte, ValueBytes)
			for {
				n := next.Add(1) - 1
				if n >= total || ctx.Err() != nil {
					return
				}
				i, j := int(n%Nodes), int(n/Nodes)
				binary.BigEndian.PutUint64(v, uint64(n))
				if err := loadPut(ctx, db, k.Key(i, j), v); err != nil {
					errc <- fmt.Errorf("hierbench: loading object %d of node %d: %w", j, i, err)
					return
				}
				if d := done.Add(1); progress != nil && d%5000 == 0 {
					progress(int(d))
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	return ctx.Err()
}

// LoadPutAttemptsMax bounds the attempts of one put of Load.
const LoadPutAttemptsMax = 5

// loadPut writes one object, again after an ambiguous or retryable error
// (the put writes the same value each time, so repeating it is safe).
func loadPut(ctx context.Context, db *client.DB, key, v []byte) error {
	var err error
	for a := 0; a < LoadPutAttemptsMax && ctx.Err() == nil; a++ {
		err = db.Put(ctx, key, v)
		if err == nil || !(errors.Is(err, client.ErrAmbiguous) || errors.Is(err, client.ErrRetryable)) {
			return err
		}
	}
	return err
}

// Delayer injects the per-link one-way delay into a client's RPCs and
// counts them: each call waits the delay before it is sent and again
// before its reply is returned (one round trip per call). The thesis's
// clients ran on their own machines, so every node is remote.
//
// The delay is a time.Sleep, which Go's timers make longer than asked
// below about a millisecond (on the 2-core VM of docs/BENCHMARKS.md a
// sleep of 0.25 ms takes about 1 ms): the time each sleep took in fact
// is summed, and Realized gives it, for the benchmark to state. (A
// timerfd read through the poller was tried: closer when the machine is
// idle, 0.3 ms, but 6 to 8 ms under load, as the poller's wake-ups queue
// behind runnable goroutines, where the runtime's own timers do not.)
type Delayer struct {
	oneWayNs atomic.Int64
	calls    atomic.Int64
	// sleeps and sleptNs: the delays injected and their realized sum.
	sleeps, sleptNs atomic.Int64
}

// Realized returns the count and the summed realized time of the sleeps
// injected so far.
func (d *Delayer) Realized() (sleeps int64, slept time.Duration) {
	return d.sleeps.Load(), time.Duration(d.sleptNs.Load())
}

func (d *Delayer) sleep(w time.Duration) {
	t := time.Now()
	time.Sleep(w)
	d.sleptNs.Add(int64(time.Since(t)))
	d.sleeps.Add(1)
}

// SetOneWay sets the delay of each direction.
func (d *Delayer) SetOneWay(x time.Duration) { d.oneWayNs.Store(int64(x)) }

// Calls is the number of RPCs made so far.
func (d *Delayer) Calls() int64 { return d.calls.Load() }

// Interceptor is the client interceptor that delays and counts.
func (d *Delayer) Interceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		d.calls.Add(1)
		w := time.Duration(d.oneWayNs.Load())
		if w > 0 {
			d.sleep(w)
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		if w > 0 {
			d.sleep(w)
		}
		return err
	}
}

// Limits bound one point: Warmup unmeasured, then Duration measured.
type Limits struct {
	Warmup, Duration time.Duration
}

// Validate checks the bounds.
func (l Limits) Validate() error {
	if l.Duration <= 0 || l.Warmup < 0 {
		return fmt.Errorf("hierbench: a point needs a positive duration and a warm-up >= 0, got %v and %v", l.Duration, l.Warmup)
	}
	return nil
}

// Point is one system at one number of clients, one class of its
// transactions.
type Point struct {
	System  string
	Clients int
	// Share is the point's fraction of distributed transactions (1: the
	// thesis's workload, all distributed); Class is the class these
	// figures are of, ClassDistributed or ClassLocal.
	Share float64
	Class string
	// Disjoint: each client had objects of its own (Runner.Disjoint).
	Disjoint bool
	// Round numbers the repetitions of the run's sequence of points (0
	// for the first).
	Round int
	// Txns committed in the measured window, Seconds its length.
	Txns    int64
	Seconds float64
	// Mean and P99 latency of a committed transaction, retries included.
	Mean, P99 time.Duration
	// MeanBefore, MeanBody and MeanCommit split Mean at the committed
	// attempt's body: begin and any aborted attempts (with their
	// backoff); the body (8 reads, each followed by a write the protocol
	// buffers or sends); the commit.
	MeanBefore, MeanBody, MeanCommit time.Duration
	// P99Before, P99Body and P99Commit are each phase's own 99th
	// percentile (of different transactions, so they do not add up to
	// P99): which phase a tail comes from.
	P99Before, P99Body, P99Commit time.Duration
	// AbortedAttempts: attempts that aborted and were retried, of the
	// transactions committed in the window.
	AbortedAttempts int64
	// Failed: transactions that gave up (error other than commit).
	Failed int64
	// RPCsPerTxn: client RPCs per committed transaction (reads, commit,
	// cleanup, oracle); ProtocolMessagesPerTxn and ProtocolStepsPerTxn:
	// the commit protocol's own counts (0 where the protocol counts none).
	RPCsPerTxn, ProtocolMessagesPerTxn, ProtocolStepsPerTxn float64
	// OneWayMs is the injected per-link delay.
	OneWayMs float64
	// Fenced is about how long, in the point (warm-up included), some
	// node refused hierarchy parts on a range it leads because the range's
	// lease fence had restarted (kvserver.HierarchyLeaseFence: a lease
	// lost and taken again); 0 for the other protocols.
	Fenced time.Duration
	// Resent and Forgotten are the hierarchy validators' recoveries in the
	// point (warm-up included): votes a leaf sent again after waiting
	// ResendAfter (1 s) for a decision, and transactions an inner
	// validator forgot for want of votes; 0 for the other protocols.
	Resent, Forgotten int64
	// Think is the clients' mean pause between transactions
	// (Runner.Think; 0: closed loop with no pause).
	Think time.Duration
	// ClientDelay and LinkDelay are the one-way delays realized in the
	// point, of the asked OneWayMs: the mean time a client RPC's injected
	// sleep took in the measured window, and the mean time a validator
	// link held a delayed batch (warm-up included; 0 where none was
	// delayed). A coarse timer makes them longer than asked.
	ClientDelay, LinkDelay time.Duration
	// CPU is the CPU the benchmark's process (nodes, validators and
	// clients alike) used in the measured window, in cores (2 is both
	// cores of a 2-core machine busy); 0 where the process CPU time is not available (kvbench.ProcessCPU).
	CPU float64
}

// Throughput is committed transactions per second.
func (p Point) Throughput() float64 {
	if p.Seconds <= 0 {
		return 0
	}
	return float64(p.Txns) / p.Seconds
}

// Runner runs points on one cluster.
type Runner struct {
	// DBs are the clients' connections; client c uses DBs[c % len].
	DBs     []*client.DB
	Delayer *Delayer
	Keys    Keyspace
	Seed    uint64
	// Disjoint gives each client objects of its own (see
	// Keyspace.ValidateDisjoint): no two transactions touch one object, so
	// none conflicts and every one commits at its first attempt. It is the
	// stand-in for the thesis's runs with validation logic off (4.2, where
	// all transactions commit): docs/BENCHMARKS.md says what differs.
	Disjoint bool
	// Think is each client's mean pause after a transaction before its
	// next (drawn uniformly from [0, 2*Think], so that clients do not fall
	// into step); 0 is a closed loop without pauses. A pause bounds the
	// offered load below what saturates the machine, so that a latency
	// measures the protocol's waits more than the queue for the cores.
	Think time.Duration
}

// ThinkMax bounds Runner.Think.
const ThinkMax = 10 * time.Second

// Classes of transaction: a distributed one updates one object on each of
// UpdatesPerTxn nodes (the thesis's workload), a local one updates
// UpdatesPerTxn distinct objects of one node (decided by that node's leaf
// alone under the hierarchy protocols).
const (
	ClassDistributed = "distributed"
	ClassLocal       = "local"
)

// ValidateShare checks a distributed share: the fraction of transactions
// that are distributed, in [0, 1]; below 1, local transactions need
// UpdatesPerTxn distinct objects per node.
func (k Keyspace) ValidateShare(share float64) error {
	if !(share >= 0 && share <= 1) {
		return fmt.Errorf("hierbench: distributed share %v not in [0, 1]", share)
	}
	if share < 1 && k.PerNode() < UpdatesPerTxn {
		return fmt.Errorf("hierbench: local transactions need %d objects per node, have %d", UpdatesPerTxn, k.PerNode())
	}
	return nil
}

// ValidateDisjoint checks that clients can each have objects of their
// own: client c of clients takes, on every node, the objects j with
// j mod clients = c, so each node needs at least one object per client,
// and UpdatesPerTxn per client where local transactions run (share < 1).
func (k Keyspace) ValidateDisjoint(clients int, share float64) error {
	need := 1
	if share < 1 {
		need = UpdatesPerTxn
	}
	if clients < 1 || k.PerNode()/clients < need {
		return fmt.Errorf("hierbench: %d clients with objects of their own need %d objects per node (%d per client), have %d",
			clients, clients*need, need, k.PerNode())
	}
	return nil
}

// objects picks the objects a client's transactions take on a node,
// uniformly among the client's own: j = client + clients*r. Keys uniform
// over all of a node's objects are the case of one client owning all
// (allObjects).
type objects struct {
	perNode         int
	client, clients int
}

func allObjects(perNode int) objects { return objects{perNode: perNode, clients: 1} }

func (o objects) pick(rng *rand.Rand) int {
	return o.client + o.clients*rng.IntN(o.perNode/o.clients)
}

// Txn runs one distributed transaction of the workload on db: for each
// node, in a random order, read then write one uniformly chosen object
// there.
func Txn(ctx context.Context, db *client.DB, k Keyspace, rng *rand.Rand) error {
	_, _, err := txnOf(ctx, db, k, allObjects(k.PerNode()), rng, false)
	return err
}

// phases splits a transaction's latency at its committed attempt's body:
// before it (begin, and any aborted attempts with their backoff), the body
// (the reads; the writes are buffered or sent as the protocol does), and
// after it (the commit). They add up to about the latency (Run's clock
// starts a little earlier, before the objects are chosen).
type phases struct {
	before, body, commit time.Duration
}

// txnOf runs one transaction, local or distributed, with objects chosen by
// from, and returns how many times its body ran (attempts: 1 plus the
// retries) and where its time went.
func txnOf(ctx context.Context, db *client.DB, k Keyspace, from objects, rng *rand.Rand, local bool) (int, phases, error) {
	var nodes, objs []int
	if local {
		// UpdatesPerTxn distinct objects of one node.
		n := rng.IntN(Nodes)
		seen := map[int]bool{}
		for len(objs) < UpdatesPerTxn {
			if j := from.pick(rng); !seen[j] {
				seen[j] = true
				nodes, objs = append(nodes, n), append(objs, j)
			}
		}
	} else {
		nodes = rng.Perm(Nodes)[:UpdatesPerTxn]
		objs = make([]int, len(nodes))
		for i := range objs {
			objs[i] = from.pick(rng)
		}
	}
	attempts := 0
	t0 := time.Now()
	var bodyStart, bodyEnd time.Time
	err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		attempts++
		bodyStart = time.Now()
		defer func() { bodyEnd = time.Now() }()
		for i, n := range nodes {
			key := k.Key(n, objs[i])
			v, _, err := txn.Get(ctx, key)
			if err != nil {
				return err
			}
			nv := make([]byte, ValueBytes)
			copy(nv, v)
			binary.BigEndian.PutUint64(nv[8:], binary.BigEndian.Uint64(nv[8:])+1)
			if err := txn.Put(ctx, key, nv); err != nil {
				return err
			}
		}
		return nil
	})
	end := time.Now()
	return attempts, phases{before: bodyStart.Sub(t0), body: bodyEnd.Sub(bodyStart), commit: end.Sub(bodyEnd)}, err
}

// classStats is what one class of transaction recorded in a point.
type classStats struct {
	lats []time.Duration
	// phaseLats holds each phase of each transaction of lats (before,
	// body, commit).
	phaseLats [3][]time.Duration
	retries   int64
	// failed counts the class's transactions that gave up (any time,
	// warm-up included, without mu).
	failed atomic.Int64
}

// Run measures system at clients closed-loop clients, of whose
// transactions a share (in [0, 1]; 1 is the thesis's workload) is
// distributed and the rest local, each client drawing the class of each
// transaction. It returns a point per class that ran: the distributed
// class first. RPCsPerTxn, ProtocolMessagesPerTxn and
// ProtocolStepsPerTxn are of the whole point (both classes) in each.
func (r *Runner) Run(ctx context.Context, system string, clients int, share float64, l Limits) ([]Point, error) {
	if clients < 1 || clients > ClientsMax {
		return nil, fmt.Errorf("hierbench: %d clients: want [1, %d]", clients, ClientsMax)
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if err := r.Keys.ValidateShare(share); err != nil {
		return nil, err
	}
	if r.Think < 0 || r.Think > ThinkMax {
		return nil, fmt.Errorf("hierbench: think time %v not in [0, %v]", r.Think, ThinkMax)
	}
	if r.Disjoint {
		if err := r.Keys.ValidateDisjoint(clients, share); err != nil {
			return nil, err
		}
	}
	var measuring atomic.Bool
	var mu sync.Mutex
	var local, dist classStats
	var firstErr error
	runCtx, cancel := context.WithTimeout(ctx, l.Warmup+l.Duration)
	defer cancel()
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db := r.DBs[c%len(r.DBs)]
			rng := rand.New(rand.NewPCG(r.Seed, uint64(c)))
			for runCtx.Err() == nil {
				isLocal := share < 1 && (share == 0 || rng.Float64() >= share)
				start := time.Now()
				from := allObjects(r.Keys.PerNode())
				if r.Disjoint {
					from.client, from.clients = c, clients
				}
				attempts, ph, err := txnOf(runCtx, db, r.Keys, from, rng, isLocal)
				if runCtx.Err() != nil {
					return // cut by the end of the point: not counted
				}
				cs := &dist
				if isLocal {
					cs = &local
				}
				if err != nil {
					cs.failed.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				if measuring.Load() {
					d := time.Since(start)
					mu.Lock()
					cs.lats = append(cs.lats, d)
					for i, d := range []time.Duration{ph.before, ph.body, ph.commit} {
						cs.phaseLats[i] = append(cs.phaseLats[i], d)
					}
					cs.retries += int64(attempts - 1)
					mu.Unlock()
				}
				if r.Think > 0 {
					pause := time.Duration(rng.Int64N(int64(2*r.Think) + 1))
					select {
					case <-time.After(pause):
					case <-runCtx.Done():
					}
				}
			}
		}()
	}
	select {
	case <-time.After(l.Warmup):
	case <-runCtx.Done():
	}
	before, cpu0 := r.snapshot(), kvbench.ProcessCPU()
	measuring.Store(true)
	t0 := time.Now()
	<-runCtx.Done()
	after, cpu1 := r.snapshot(), kvbench.ProcessCPU()
	secs := time.Since(t0).Seconds()
	var clientDelay time.Duration
	if n := after.sleeps - before.sleeps; n > 0 {
		clientDelay = (after.slept - before.slept) / time.Duration(n)
	}
	var cpu float64 // 0 where the process's CPU time is not available
	if secs > 0 {
		cpu = (cpu1 - cpu0).Seconds() / secs
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if len(local.lats)+len(dist.lats) == 0 && firstErr != nil {
		return nil, fmt.Errorf("hierbench: %s at %d clients: no transaction committed; first error: %w", system, clients, firstErr)
	}
	// No commit and no error: every transaction took longer than the
	// window (a stall); the point is kept, with no latency.
	var rpcs, msgs, steps float64
	if commits := float64(after.commits - before.commits); commits > 0 {
		rpcs = float64(after.rpcs-before.rpcs) / commits
		msgs = float64(after.msgs-before.msgs) / commits
		steps = float64(after.steps-before.steps) / commits
	}
	var out []Point
	for _, c := range []struct {
		class string
		cs    *classStats
		runs  bool
	}{{ClassDistributed, &dist, share > 0}, {ClassLocal, &local, share < 1}} {
		if !c.runs {
			continue
		}
		p := Point{System: system, Clients: clients, Share: share, Class: c.class, Disjoint: r.Disjoint, Txns: int64(len(c.cs.lats)), Seconds: secs,
			Failed: c.cs.failed.Load(), AbortedAttempts: c.cs.retries, OneWayMs: float64(r.Delayer.oneWayNs.Load()) / 1e6,
			RPCsPerTxn: rpcs, ProtocolMessagesPerTxn: msgs, ProtocolStepsPerTxn: steps, Think: r.Think, CPU: cpu, ClientDelay: clientDelay}
		p.Mean, p.P99 = meanP99(c.cs.lats)
		p.MeanBefore, p.P99Before = meanP99(c.cs.phaseLats[0])
		p.MeanBody, p.P99Body = meanP99(c.cs.phaseLats[1])
		p.MeanCommit, p.P99Commit = meanP99(c.cs.phaseLats[2])
		out = append(out, p)
	}
	return out, nil
}

// meanP99 is the mean and the 99th percentile of lats (sorted in place);
// zero for none.
func meanP99(lats []time.Duration) (mean, p99 time.Duration) {
	if len(lats) == 0 {
		return 0, 0
	}
	slices.Sort(lats)
	var sum time.Duration
	for _, d := range lats {
		sum += d
	}
	return sum / time.Duration(len(lats)), lats[(len(lats)*99)/100]
}

type counters struct {
	commits, rpcs, msgs, steps int64
	// sleeps and slept: the Delayer's injected sleeps and their realized
	// time.
	sleeps int64
	slept  time.Duration
}

func (r *Runner) snapshot() counters {
	var c counters
	for _, db := range r.DBs {
		s := db.Stats()
		c.commits += s.Commits
		c.msgs += s.ProtocolMessages
		c.steps += s.ProtocolSteps
	}
	c.rpcs = r.Delayer.Calls()
	c.sleeps, c.slept = r.Delayer.Realized()
	return c
}
