package replica

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/storage"
	"github.com/prometheus/client_golang/prometheus"
)

// Limits of SchedulerConfig.
const (
	// SchedulerWorkersMax bounds SchedulerConfig.Workers.
	SchedulerWorkersMax = 64
	// SchedulerBatchRangesLimit bounds SchedulerConfig.BatchRangesMax.
	SchedulerBatchRangesLimit = 1024
)

// SchedulerConfig configures a Scheduler. The zero value of each field but
// Engine means its default.
type SchedulerConfig struct {
	// Engine is the node's engine: the Raft state of every replica of the
	// scheduler is persisted in it, the ranges of one round in one batch.
	// Required.
	Engine *storage.Engine
	// Workers is the number of worker goroutines, each processing the
	// Ready work of some ranges at a time (default max(1, min(GOMAXPROCS/2,
	// 8)): on the 2-core machine of docs/BENCHMARKS.md, three nodes with one
	// worker each put 3,139-3,193 ops/s at 64 clients against 2,581-2,945
	// with four, with bigger group commits (3.05 ranges per sync against
	// 1.5);
	// at most SchedulerWorkersMax). More workers overlap one round's sync
	// with another's evaluation and apply; fewer put more ranges in each
	// group commit.
	Workers int
	// BatchRangesMax is the number of ranges a worker takes from the queue
	// for one round: their Raft state goes to disk in one batch with at
	// most one sync (default 64; at most SchedulerBatchRangesLimit). 1
	// gives one commit per range (Pebble still merges concurrent syncs).
	BatchRangesMax int
	// BatchBytesMax bounds the size of one round's batch: once it holds
	// this many bytes the worker commits it and starts another round with
	// the rest of its ranges (default 16 MiB). A single range's Ready may
	// exceed it.
	BatchBytesMax int
	// Metrics, if not nil, is where the scheduler registers its Prometheus
	// metrics (raft_metrics.go) while it runs; nil: none registered.
	Metrics prometheus.Registerer
}

// EnsureDefaults fills the zero fields with their defaults.
func (c *SchedulerConfig) EnsureDefaults() {
	if c.Workers == 0 {
		c.Workers = max(1, min(runtime.GOMAXPROCS(0)/2, 8))
	}
	if c.BatchRangesMax == 0 {
		c.BatchRangesMax = 64
	}
	if c.BatchBytesMax == 0 {
		c.BatchBytesMax = 16 << 20
	}
}

// Validate rejects a configuration out of its limits.
func (c *SchedulerConfig) Validate() error {
	switch {
	case c.Engine == nil:
		return errors.New("replica: SchedulerConfig.Engine is required")
	case c.Workers < 1 || c.Workers > SchedulerWorkersMax:
		return fmt.Errorf("replica: SchedulerConfig.Workers %d outside [1, %d]", c.Workers, SchedulerWorkersMax)
	case c.BatchRangesMax < 1 || c.BatchRangesMax > SchedulerBatchRangesLimit:
		return fmt.Errorf("replica: SchedulerConfig.BatchRangesMax %d outside [1, %d]", c.BatchRangesMax, SchedulerBatchRangesLimit)
	case c.BatchBytesMax < 1:
		return fmt.Errorf("replica: SchedulerConfig.BatchBytesMax %d below 1", c.BatchBytesMax)
	}
	return nil
}

// SchedulerMetrics counts a scheduler's work since it started.
type SchedulerMetrics struct {
	// Rounds: batches of ranges processed by a worker (one group commit
	// each, or none if no range had state to persist).
	Rounds uint64
	// RangesHandled: ranges taken by those rounds (each had its inbox
	// drained and its Ready, if any, processed).
	RangesHandled uint64
	// Commits: batches of Raft state written to the engine.
	Commits uint64
	// Syncs: those of Commits that were synced.
	Syncs uint64
	// RangesPersisted: ranges whose Raft state went into one of Commits.
	RangesPersisted uint64
	// RangesSynced: ranges whose Raft state went into one of Syncs. Their
	// ratio to Syncs is the mean number of ranges a sync served.
	RangesSynced uint64
}

// Scheduler processes the Ready work of every replica on a node with a
// bounded pool of workers.
//
// A replica with work (a message, a proposal, a read, a tick...) is put in
// a FIFO queue, at most once: a replica already queued stays where it is,
// and one being processed is marked to be queued again when its worker is
// done with it. So the queue never holds more entries than there are
// registered replicas, and a replica is processed by one worker at a time:
// its Ready and the Advance that ends it are never interleaved with another
// worker's calls on its RawNode.
//
// A worker takes up to BatchRangesMax replicas from the queue and handles
// them in one round (see round): the Raft state of all of them goes to the
// engine in one batch with one sync (group commit), then each sends, applies
// and advances. Under load the queue fills while the workers sync, so the
// next round takes many ranges at once: the number of syncs per second
// stays near the disk's rate while the ranges they serve grow with the load.
//
// Rejected: one goroutine per replica, each syncing its own batch (the
// design before this one). Pebble merges concurrent synced commits into one
// WAL sync, but every range paid a goroutine, a wake-up and a commit
// pipeline pass per Ready, and the number of ranges a sync could serve was
// bounded by how many goroutines happened to commit at the same moment.
// Rejected too: a dedicated syncer goroutine that coalesces the commits of
// per-range workers, which is what Pebble's commit pipeline already does.
type Scheduler struct {
	cfg SchedulerConfig

	mu struct {
		sync.Mutex
		// queue holds replicas with work, each at most once (queued set).
		// Invariant: len(queue) <= registered.
		queue      []*Replica
		registered int
		// processing counts replicas held by workers.
		processing int
		closed     bool
	}
	// cond is signalled when the queue grows or the scheduler closes.
	cond *sync.Cond
	wg   sync.WaitGroup

	metrics struct {
		rounds, rangesHandled, commits, syncs, rangesPersisted, rangesSynced atomic.Uint64
	}
	// prom: the Prometheus metrics (raft_metrics.go).
	prom *raftMetrics
	// testingRoundHook, if set, runs at the start of each round with its
	// replicas; testingCommitHook before each group commit (tests).
	testingRoundHook  func([]*Replica)
	testingCommitHook func()
}

// schedState is a replica's place in its scheduler; guarded by
// Scheduler.mu.
type schedState struct {
	registered bool
	// queued: in Scheduler.mu.queue. Invariant: not both queued and
	// processing.
	queued bool
	// processing: a worker holds the replica.
	processing bool
	// again: work arrived while processing; queue it when the worker is
	// done.
	again bool
}

// NewScheduler validates cfg and starts the scheduler's workers. Close
// stops them.
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{cfg: cfg}
	var err error
	if s.prom, err = newRaftMetrics(s, cfg.Metrics); err != nil {
		return nil, err
	}
	s.cond = sync.NewCond(&s.mu.Mutex)
	s.wg.Add(cfg.Workers)
	for i := 0; i < cfg.Workers; i++ {
		go s.work()
	}
	return s, nil
}

// Config returns the scheduler's configuration with defaults filled in.
func (s *Scheduler) Config() SchedulerConfig { return s.cfg }

// Metrics returns the scheduler's counters.
func (s *Scheduler) Metrics() SchedulerMetrics {
	return SchedulerMetrics{
		Rounds:          s.metrics.rounds.Load(),
		RangesHandled:   s.metrics.rangesHandled.Load(),
		Commits:         s.metrics.commits.Load(),
		Syncs:           s.metrics.syncs.Load(),
		RangesPersisted: s.metrics.rangesPersisted.Load(),
		RangesSynced:    s.metrics.rangesSynced.Load(),
	}
}

// Close stops the workers and waits for them. Replicas still registered
// are processed no more; their callers wait until they are stopped. Close
// must not be called from a worker (a StateMachine or a callback).
func (s *Scheduler) Close() {
	s.closeAsync()
	s.wg.Wait()
	s.prom.unregister()
}

// closeAsync stops the workers without waiting for them.
func (s *Scheduler) closeAsync() {
	s.mu.Lock()
	s.mu.closed = true
	s.mu.queue = nil
	s.mu.Unlock()
	s.cond.Broadcast()
}

// register makes r schedulable and queues it once.
func (s *Scheduler) register(r *Replica) {
	s.mu.Lock()
	if r.sched.registered {
		s.mu.Unlock()
		return
	}
	r.sched.registered = true
	s.mu.registered++
	s.mu.Unlock()
	s.enqueue(r)
}

// unregister removes r from the scheduler. A worker holding r finishes its
// round with it; stop guarantees that it touches nothing after Stop.
func (s *Scheduler) unregister(r *Replica) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !r.sched.registered {
		return
	}
	r.sched.registered = false
	s.mu.registered--
	if r.sched.queued {
		r.sched.queued = false
		for i, q := range s.mu.queue {
			if q == r {
				s.mu.queue = append(s.mu.queue[:i], s.mu.queue[i+1:]...)
				break
			}
		}
	}
	r.sched.again = false
}

// enqueue notes that r has work.
func (s *Scheduler) enqueue(r *Replica) {
	s.mu.Lock()
	if !r.sched.registered || s.mu.closed {
		s.mu.Unlock()
		return
	}
	if r.sched.processing {
		r.sched.again = true
		s.mu.Unlock()
		return
	}
	if r.sched.queued {
		s.mu.Unlock()
		return
	}
	r.sched.queued = true
	s.mu.queue = append(s.mu.queue, r)
	if len(s.mu.queue) > s.mu.registered {
		panic(fmt.Sprintf("replica: scheduler queue holds %d replicas, only %d registered", len(s.mu.queue), s.mu.registered))
	}
	s.mu.Unlock()
	s.cond.Signal()
}

// next waits for work and takes up to BatchRangesMax replicas from the
// queue, appending them to batch. It returns nil once the scheduler is
// closed.
func (s *Scheduler) next(batch []*Replica) []*Replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.mu.queue) == 0 && !s.mu.closed {
		s.cond.Wait()
	}
	if s.mu.closed {
		return nil
	}
	k := min(len(s.mu.queue), s.cfg.BatchRangesMax)
	for _, r := range s.mu.queue[:k] {
		r.sched.queued = false
		r.sched.processing = true
		s.mu.processing++
		batch = append(batch, r)
	}
	// Shift rather than reslice, so that the array is reused and the
	// queue's memory stays bounded by the number of replicas.
	n := copy(s.mu.queue, s.mu.queue[k:])
	clear(s.mu.queue[n:])
	s.mu.queue = s.mu.queue[:n]
	if n > 0 {
		// Another worker can take the rest.
		s.cond.Signal()
	}
	return batch
}

// release ends a worker's hold on r, queueing r again if work arrived
// meanwhile or its RawNode has more (more).
func (s *Scheduler) release(r *Replica, more bool) {
	s.mu.Lock()
	r.sched.processing = false
	s.mu.processing--
	requeue := (r.sched.again || more) && r.sched.registered && !s.mu.closed
	r.sched.again = false
	s.mu.Unlock()
	if requeue {
		s.enqueue(r)
	}
}

func (s *Scheduler) work() {
	defer s.wg.Done()
	var batch []*Replica
	var more []bool
	for {
		batch = s.next(batch[:0])
		if batch == nil {
			return
		}
		for _, r := range batch {
			if r.workers.Add(1) != 1 {
				panic(fmt.Sprintf("replica r%d: processed by two workers at once", r.cfg.RangeID))
			}
		}
		more = slices.Grow(more[:0], len(batch))[:len(batch)]
		clear(more)
		for i := 0; i < len(batch); {
			i += s.round(batch[i:], more[i:])
		}
		for i, r := range batch {
			r.workers.Add(-1)
			s.release(r, more[i])
		}
		clear(batch)
	}
}

// round processes the Ready work of a prefix of batch, the ranges whose
// Raft state fits in one engine batch (BatchBytesMax), and returns the
// length of that prefix. more[i] is set when batch[i] has more work.
//
// The round has two phases; each range's raftMu is held for the whole of
// the first, and again for its own part of the second:
//
//  1. For each range: drain its inbox into the RawNode, take its Ready,
//     send the messages that promise nothing about this node's disk (the
//     leader's appends among them), and write its entries, HardState and
//     snapshot into the shared batch. Then commit the batch, synced if any
//     range needs it, and update each range's in-memory log.
//  2. For each range: send the messages that promise durable state
//     (append and vote acknowledgements), apply committed entries, serve
//     reads, Advance.
//
// raftMu is released between the phases because phase 2 runs the state
// machine, which may stop another replica (a split replaces the
// uninitialized replica of its right hand side), and that replica may be
// one of this round's: Stop takes its raftMu, which must then be free.
// The scheduler's processing flag, not raftMu, keeps other workers away
// from the RawNode between the phases.
func (s *Scheduler) round(batch []*Replica, more []bool) int {
	if h := s.testingRoundHook; h != nil {
		h(batch)
	}
	s.metrics.rounds.Add(1)
	start := time.Now()
	defer func() { s.prom.roundSeconds.Observe(time.Since(start).Seconds()) }()
	wb := s.cfg.Engine.NewWriteBatch()
	defer wb.Close()
	var pending []*pendingReady
	sync := false
	wrote := 0
	n := 0
	for ; n < len(batch) && (n == 0 || wb.Len() < s.cfg.BatchBytesMax); n++ {
		r := batch[n]
		r.raftMu.Lock()
		p := r.prepareReady(wb)
		if p == nil {
			r.raftMu.Unlock()
			continue
		}
		p.slot = n
		sync = sync || p.sync
		if p.wrote {
			wrote++
		}
		pending = append(pending, p)
	}
	s.metrics.rangesHandled.Add(uint64(n))
	if len(pending) > 0 {
		if wrote > 0 {
			if h := s.testingCommitHook; h != nil {
				h()
			}
			commitStart := time.Now()
			if err := wb.Commit(sync); err != nil {
				panic(fmt.Sprintf("replica: persisting the Raft state of %d ranges: %v", wrote, err))
			}
			if sync {
				s.prom.syncSeconds.Observe(time.Since(commitStart).Seconds())
			}
			s.metrics.commits.Add(1)
			s.metrics.rangesPersisted.Add(uint64(wrote))
			if sync {
				s.metrics.syncs.Add(1)
				s.metrics.rangesSynced.Add(uint64(wrote))
			}
		}
		for _, p := range pending {
			p.r.persisted(p)
			p.r.raftMu.Unlock()
		}
		for _, p := range pending {
			p.r.raftMu.Lock()
			more[p.slot] = p.r.completeReady(p)
			p.r.raftMu.Unlock()
		}
	}
	return n
}
