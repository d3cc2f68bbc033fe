package hierbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/canopy-db/canopy/client"
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

// SystemByName returns the system called name.
func SystemByName(name string) (System, bool) {
	for _, s := range Systems() {
		if s.Name == name {
			return s, true
		}
	}
	return System{}, false
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
				if err := db.Put(ctx, k.Key(i, j), v); err != nil {
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

// Delayer injects the per-link one-way delay into a client's RPCs and
// counts them: each call waits the delay before it is sent and again
// before its reply is returned (one round trip per call). The thesis's
// clients ran on their own machines, so every node is remote.
type Delayer struct {
	oneWayNs atomic.Int64
	calls    atomic.Int64
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
			time.Sleep(w)
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		if w > 0 {
			time.Sleep(w)
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

// Point is one system at one number of clients.
type Point struct {
	System  string
	Clients int
	// Txns committed in the measured window, Seconds its length.
	Txns    int64
	Seconds float64
	// Mean and P99 latency of a committed transaction, retries included.
	Mean, P99 time.Duration
	// AbortedAttempts: attempts that aborted (retried), in the window.
	AbortedAttempts int64
	// Failed: transactions that gave up (error other than commit).
	Failed int64
	// RPCsPerTxn: client RPCs per committed transaction (reads, commit,
	// cleanup, oracle); ProtocolMessagesPerTxn and ProtocolStepsPerTxn:
	// the commit protocol's own counts (0 where the protocol counts none).
	RPCsPerTxn, ProtocolMessagesPerTxn, ProtocolStepsPerTxn float64
	// OneWayMs is the injected per-link delay.
	OneWayMs float64
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
}

// Txn runs one transaction of the workload on db: for each node, in a
// random order, read then write one uniformly chosen object there.
func Txn(ctx context.Context, db *client.DB, k Keyspace, rng *rand.Rand) error {
	nodes := rng.Perm(Nodes)[:UpdatesPerTxn]
	objs := make([]int, len(nodes))
	for i := range objs {
		objs[i] = rng.IntN(k.PerNode())
	}
	return db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
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
}

// Run measures system at clients closed-loop clients.
func (r *Runner) Run(ctx context.Context, system string, clients int, l Limits) (Point, error) {
	if clients < 1 || clients > ClientsMax {
		return Point{}, fmt.Errorf("hierbench: %d clients: want [1, %d]", clients, ClientsMax)
	}
	if err := l.Validate(); err != nil {
		return Point{}, err
	}
	var measuring atomic.Bool
	var mu sync.Mutex
	var lats []time.Duration
	var failed atomic.Int64
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
				start := time.Now()
				err := Txn(runCtx, db, r.Keys, rng)
				if runCtx.Err() != nil {
					return // cut by the end of the point: not counted
				}
				if err != nil {
					failed.Add(1)
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
					lats = append(lats, d)
					mu.Unlock()
				}
			}
		}()
	}
	select {
	case <-time.After(l.Warmup):
	case <-runCtx.Done():
	}
	before := r.snapshot()
	measuring.Store(true)
	t0 := time.Now()
	<-runCtx.Done()
	after := r.snapshot()
	secs := time.Since(t0).Seconds()
	wg.Wait()
	if ctx.Err() != nil {
		return Point{}, ctx.Err()
	}
	p := Point{System: system, Clients: clients, Txns: int64(len(lats)), Seconds: secs, Failed: failed.Load(),
		AbortedAttempts: after.aborts - before.aborts, OneWayMs: float64(r.Delayer.oneWayNs.Load()) / 1e6}
	if len(lats) == 0 {
		if firstErr != nil {
			return p, fmt.Errorf("hierbench: %s at %d clients: no transaction committed; first error: %w", system, clients, firstErr)
		}
		return p, errors.New("hierbench: no transaction committed in the window")
	}
	slices.Sort(lats)
	var sum time.Duration
	for _, d := range lats {
		sum += d
	}
	p.Mean = sum / time.Duration(len(lats))
	p.P99 = lats[(len(lats)*99)/100]
	commits := float64(after.commits - before.commits)
	if commits > 0 {
		p.RPCsPerTxn = float64(after.rpcs-before.rpcs) / commits
		p.ProtocolMessagesPerTxn = float64(after.msgs-before.msgs) / commits
		p.ProtocolStepsPerTxn = float64(after.steps-before.steps) / commits
	}
	return p, nil
}

type counters struct{ commits, aborts, rpcs, msgs, steps int64 }

func (r *Runner) snapshot() counters {
	var c counters
	for _, db := range r.DBs {
		s := db.Stats()
		c.commits += s.Commits
		c.aborts += s.Aborts
		c.msgs += s.ProtocolMessages
		c.steps += s.ProtocolSteps
	}
	c.rpcs = r.Delayer.Calls()
	return c
}
