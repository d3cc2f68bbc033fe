package client

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// Two jobs live here.
//
// Foreign intents (resolveForeign): an operation met intents of other
// transactions. For each such transaction, its status record decides:
// committed at c -> ResolveIntent(key, start, c); aborted -> ResolveIntent
// (key, start, 0). No record: its heartbeat record says whether it is alive;
// missing or expired -> write "aborted" with put-unless-exists (which may
// lose to its commit: then the existing value decides); alive -> wait with
// backoff, re-checking, up to a budget, then give up with ErrRetryable. The
// budget is short when the waiter is younger than the intent's transaction
// and holds intents itself, so that a cycle of waiters breaks at its
// younger members (wait-die) instead of every member waiting out the long
// budget (see waiter.budget).
//
// Own intents after a decision (intentResolver): resolved asynchronously by
// a bounded pool, batched per range, then the heartbeat record is deleted.
// Readers never depend on this cleanup for correctness (they resolve what
// they meet), only for speed.

// heartbeatValue encodes an expiry as the heartbeat record's value: 8-byte
// big-endian Unix milliseconds.
func heartbeatValue(expiry time.Time) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(expiry.UnixMilli()))
}

// heartbeatExpired reports whether a heartbeat record value is past now.
func heartbeatExpired(v []byte, now time.Time) (bool, error) {
	if len(v) != 8 {
		return false, fmt.Errorf("%w: heartbeat record is %d bytes, want 8", ErrInternal, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)) <= now.UnixMilli(), nil
}

// waiter is who waits for another transaction's intents to go.
type waiter struct {
	// startTs is the waiting transaction's, 0 for a non-transactional
	// operation (which counts as the oldest: it holds nothing).
	startTs uint64
	// holdsIntents: the waiter has written intents, so others may be
	// waiting for it. Only such a waiter can close a cycle of waits.
	holdsIntents bool
}

// budget is how long w waits for a live transaction started at otherStart.
// Wait-die: a younger waiter that holds intents may be part of a cycle
// (a deadlock), so it gives up soon; the oldest member of any cycle waits
// the long budget and so survives. A waiter holding no intents is in no
// cycle and waits long too.
func (w waiter) budget(o *Options, otherStart uint64) time.Duration {
	if w.holdsIntents && w.startTs > otherStart {
		return o.IntentWaitYoungerMax
	}
	return o.IntentWaitMax
}

// wounds reports whether w aborts, after Options.IntentWoundAfter, the
// live transaction started at otherStart whose intent is in its way,
// rather than wait for it: w is a transaction older than it (wound-wait).
//
// Why: an older transaction waited up to IntentWaitMax (2 s) for a
// younger one, which in turn, meeting the older one's intents, gave up
// after IntentWaitYoungerMax and restarted with a new, still younger
// start_ts, often writing a fresh intent in the older one's way first.
// Under contention the older one's commit waited on one incarnation after
// another (commits of 1-1.5 s in the nemesis's list-append traces, at
// every fault's recovery). Aborting the younger is safe: its status
// record decides (put-unless-exists), and a coordinator that finds its
// record aborted retries (ReasonAborted). A transaction whose reads or
// writes are all in one range and commits by 1PC leaves no intent and
// is never wounded. Non-transactional waiters (start_ts 0) never wound.
func (w waiter) wounds(otherStart uint64) bool {
	return w.startTs != 0 && w.startTs < otherStart
}

// foreignTxn collects the intents of one other transaction.
type foreignTxn struct {
	startTs      uint64
	heartbeatKey []byte
	keys         [][]byte
}

// resolveForeign resolves the given intents of other transactions so that
// the waiter can retry. It returns nil once every intent is resolved, a
// *RetryableError if a live transaction stayed in the way past the wait
// budget, or a routing error.
func (db *DB) resolveForeign(ctx context.Context, intents []*rpcpb.Intent, w waiter) error {
	var txns []*foreignTxn
	byStart := map[uint64]*foreignTxn{}
	for _, in := range intents {
		s := in.GetTxn().GetStartTs()
		if s == 0 {
			return fmt.Errorf("%w: intent at %q has no start_ts", ErrInternal, in.GetKey())
		}
		if s == w.startTs {
			return fmt.Errorf("%w: server reported our own intent at %q as foreign", ErrInternal, in.GetKey())
		}
		ft := byStart[s]
		if ft == nil {
			ft = &foreignTxn{startTs: s, heartbeatKey: in.GetTxn().GetHeartbeatKey()}
			if len(ft.heartbeatKey) == 0 {
				ft.heartbeatKey = keys.HeartbeatKey(s)
			}
			byStart[s] = ft
			txns = append(txns, ft)
		}
		ft.keys = append(ft.keys, in.GetKey())
	}
	// The status encoding of every transaction met (status_schedule.go).
	if db.schedule.enabled {
		tss := make([]uint64, len(txns))
		for i, ft := range txns {
			tss[i] = ft.startTs
		}
		if err := db.ensureSchedule(ctx, false, tss...); err != nil {
			return err
		}
	}
	// Decisions known already (cached), then one batched look-up of the
	// others' status records (status_lookup.go: per status range, by
	// selective batching); only the transactions still pending wait, one
	// at a time. A single transaction goes straight to awaitDecision,
	// whose first round reads its status and heartbeat records together
	// (a separate lookup would cost a pending one an extra round).
	decided := map[uint64]uint64{}
	if len(txns) > 1 {
		starts := make([]uint64, len(txns))
		for i, ft := range txns {
			starts[i] = ft.startTs
		}
		var err error
		if decided, err = db.lookupStatuses(ctx, starts); err != nil {
			return err
		}
	} else if len(txns) == 1 {
		if c, ok := db.statuses.get(txns[0].startTs); ok {
			decided[txns[0].startTs] = c
			db.stats.statusCacheHits.add(1)
		}
	}
	var reqs []*rpcpb.RequestUnion
	for _, ft := range txns {
		c, ok := decided[ft.startTs]
		if !ok {
			d, err := db.awaitDecision(ctx, ft, w)
			if err != nil {
				return err
			}
			c = d.commitTs
		}
		for _, k := range ft.keys {
			reqs = append(reqs, &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_ResolveIntent{ResolveIntent: &rpcpb.ResolveIntentRequest{
				Key: k, TxnStart: ft.startTs, CommitTs: c}}})
		}
	}
	return db.resolveRequests(ctx, reqs)
}

// awaitDecision returns the decision of ft, aborting it if its heartbeat
// has expired and waiting (bounded) while it is alive.
func (db *DB) awaitDecision(ctx context.Context, ft *foreignTxn, w waiter) (decision, error) {
	budget := w.budget(&db.opts, ft.startTs)
	sk := db.statusKey(ft.startTs)
	bo := newBackoff(5*time.Millisecond, 100*time.Millisecond)
	// waited sums the sleeps rather than reading a clock, so that the
	// budget is the same under a test's fixed clock.
	var waited time.Duration
	for {
		resps, err := db.sender.sendPoints(ctx, false, []*rpcpb.RequestUnion{
			{Value: &rpcpb.RequestUnion_PlainGet{PlainGet: &rpcpb.PlainGetRequest{Key: sk}}},
			{Value: &rpcpb.RequestUnion_PlainGet{PlainGet: &rpcpb.PlainGetRequest{Key: ft.heartbeatKey}}},
		})
		if err != nil {
			return decision{}, err
		}
		st, hb := resps[0].GetPlainGet(), resps[1].GetPlainGet()
		if st == nil || hb == nil {
			return decision{}, fmt.Errorf("%w: plain get answered with another type", ErrInternal)
		}
		if st.GetFound() {
			c, _, err := db.decodeStatus(ft.startTs, st.GetValue())
			if err == nil {
				db.statuses.put(ft.startTs, c)
			}
			return decision{commitTs: c}, err
		}
		// No record: the transaction is alive until its start plus the
		// TTL (see heartbeat).
		expired := db.opts.Clock().UnixMilli() >= startMillis(ft.startTs)+db.opts.HeartbeatTTL.Milliseconds()
		if hb.GetFound() {
			if expired, err = heartbeatExpired(hb.GetValue(), db.opts.Clock()); err != nil {
				return decision{}, err
			}
		}
		if expired {
			// Fence a STAGING record out, or recover the transaction if
			// one is there (recovery.go).
			return db.abortOrRecover(ctx, ft.startTs, &db.stats.abortedOthers)
		}
		// Only under the default protocol: a 2pc-locking transaction's
		// locks are its protocol's, and a wound there let one commit
		// past another's read lock (G-single in TestTwoPCListAppend).
		if db.Protocol() == ProtocolDefault && w.wounds(ft.startTs) && waited >= db.opts.IntentWoundAfter {
			return db.abortOrRecover(ctx, ft.startTs, &db.stats.wounded)
		}
		if waited >= budget {
			return decision{}, &RetryableError{Reason: ReasonIntentPending, Key: ft.keys[0], Ts: ft.startTs,
				Msg: fmt.Sprintf("waited %v (budget %v) for a live transaction", waited, budget)}
		}
		d := bo.next()
		if err := sleepCtx(ctx, d); err != nil {
			return decision{}, fmt.Errorf("%w: waiting for transaction %d: %w", ErrUnavailable, ft.startTs, err)
		}
		waited += d
	}
}

// resolveKeys resolves the intents of startTs at ks to commitTs (0:
// aborted).
func (db *DB) resolveKeys(ctx context.Context, startTs, commitTs uint64, ks [][]byte) error {
	return db.resolveRequests(ctx, TxnIntents{StartTs: startTs, CommitTs: commitTs, Keys: ks}.requests(nil))
}

// requests appends to reqs the ResolveIntent requests of t's keys.
func (t TxnIntents) requests(reqs []*rpcpb.RequestUnion) []*rpcpb.RequestUnion {
	for _, k := range t.Keys {
		reqs = append(reqs, &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_ResolveIntent{ResolveIntent: &rpcpb.ResolveIntentRequest{
			Key: k, TxnStart: t.StartTs, CommitTs: t.CommitTs}}})
	}
	return reqs
}

// resolveRequests sends ResolveIntent requests in batches of at most
// Options.ResolveBatchKeysMax, split per range.
func (db *DB) resolveRequests(ctx context.Context, reqs []*rpcpb.RequestUnion) error {
	for len(reqs) > 0 {
		n := min(len(reqs), db.opts.ResolveBatchKeysMax)
		if _, err := db.sender.sendPoints(ctx, true, reqs[:n]); err != nil {
			return err
		}
		db.stats.intentsResolved.add(int64(n))
		reqs = reqs[n:]
	}
	return nil
}

// resolveTask is a decided transaction of this client whose intents and
// heartbeat record remain to be cleaned up.
type resolveTask struct {
	startTs      uint64
	commitTs     uint64 // txnstatus.Aborted when aborted
	keys         [][]byte
	heartbeatKey []byte // nil: the transaction wrote no heartbeat record
	// heartbeatDone is closed when the heartbeat goroutine has exited, so
	// that no refresh in flight can recreate the record after its deletion.
	heartbeatDone <-chan struct{}
	// staged: the transaction committed in parallel (implicitly); its
	// COMMITTED status must be recorded before any intent is resolved
	// (recovery reads a resolved intent as missing).
	staged bool
}

// intentResolver cleans up after this client's decided transactions with
// Options.ResolveWorkers goroutines fed by a queue of at most
// Options.ResolveQueueMax tasks.
type intentResolver struct {
	db    *DB
	queue chan resolveTask
	wg    sync.WaitGroup

	mu struct {
		sync.RWMutex
		// closed: no more tasks are accepted; queue is closed.
		closed bool
	}
}

func newIntentResolver(db *DB) *intentResolver {
	r := &intentResolver{db: db, queue: make(chan resolveTask, db.opts.ResolveQueueMax)}
	for range db.opts.ResolveWorkers {
		r.wg.Add(1)
		go r.work()
	}
	return r
}

// enqueue queues t, blocking while the queue is full (backpressure on
// committing callers) until ctx ends; then the task is dropped and counted.
func (r *intentResolver) enqueue(ctx context.Context, t resolveTask) {
	if r.db.opts.LeaveIntents && !t.staged {
		return
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.mu.closed {
		r.db.stats.resolveDropped.add(1)
		return
	}
	select {
	case r.queue <- t:
	case <-ctx.Done():
		r.db.stats.resolveDropped.add(1)
	}
}

// ResolveBatchTasksMax bounds the decided transactions one resolver worker
// cleans up together.
const ResolveBatchTasksMax = 64

// work cleans up decided transactions. A worker takes the task it waited
// for and every task already queued behind it (up to ResolveBatchTasksMax)
// and resolves all their intents together, grouped per range: under load,
// the intents of many transactions on one range go in one Raft proposal
// instead of one each. An idle resolver adds no delay: it never waits for
// a batch to fill.
func (r *intentResolver) work() {
	defer r.wg.Done()
	for t := range r.queue {
		batch := []resolveTask{t}
	fill:
		for len(batch) < ResolveBatchTasksMax {
			select {
			case t2, ok := <-r.queue:
				if !ok {
					break fill
				}
				batch = append(batch, t2)
			default:
				break fill
			}
		}
		r.process(batch)
	}
}

func (r *intentResolver) process(batch []resolveTask) {
	db := r.db
	ctx, cancel := context.WithTimeout(db.ctx, db.opts.AbortTimeout)
	defer cancel()
	batch = r.recordStaged(ctx, batch)
	var reqs []*rpcpb.RequestUnion
	for _, t := range batch {
		for _, k := range t.keys {
			reqs = append(reqs, &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_ResolveIntent{ResolveIntent: &rpcpb.ResolveIntentRequest{
				Key: k, TxnStart: t.startTs, CommitTs: t.commitTs}}})
		}
	}
	if err := db.resolveRequests(ctx, reqs); err != nil {
		if db.ctx.Err() == nil {
			db.opts.Logger.Warn("canopy client: intent resolution failed; readers will resolve",
				"transactions", len(batch), "keys", len(reqs), "err", err)
		}
		db.stats.resolveDropped.add(int64(len(batch)))
	}
	for _, t := range batch {
		if t.heartbeatKey == nil {
			continue
		}
		if t.heartbeatDone != nil {
			select {
			case <-t.heartbeatDone:
			case <-ctx.Done():
				return
			}
		}
		// The decision is recorded, so nobody needs the heartbeat record:
		// a reader that finds it missing aborts with put-unless-exists,
		// which loses to the decision and returns it.
		if err := db.plainPut(ctx, t.heartbeatKey, nil, true); err != nil && db.ctx.Err() == nil {
			db.opts.Logger.Warn("canopy client: heartbeat record deletion failed", "start_ts", t.startTs, "err", err)
		}
	}
}

// recordStaged writes COMMITTED for the implicitly committed transactions
// of batch (put-unless-exists, one batched request) and deletes their
// STAGING records in the same proposals, and returns the tasks
// whose intents may now be resolved: the others, and those whose status is
// recorded. A staged task whose status write fails is left to readers'
// recovery, intents and all.
func (r *intentResolver) recordStaged(ctx context.Context, batch []resolveTask) []resolveTask {
	db := r.db
	var staged []resolveTask
	var reqs []*rpcpb.RequestUnion
	out := batch[:0:0]
	for _, t := range batch {
		if !t.staged {
			out = append(out, t)
			continue
		}
		v, err := db.statusValue(t.startTs, t.commitTs)
		if err != nil {
			db.opts.Logger.Warn("canopy client: status of a staged commit does not encode", "start_ts", t.startTs, "err", err)
			continue
		}
		staged = append(staged, t)
		// The STAGING record goes in the same batch (the staging key sorts
		// right after the status key, in the same range: one proposal).
		// Safe whatever the put finds: after it the status key holds a
		// decision, and then nobody needs the record and none can be
		// written again (a STAGING put is answered with a FENCE).
		reqs = append(reqs,
			&rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainPutUnlessExists{
				PlainPutUnlessExists: &rpcpb.PlainPutUnlessExistsRequest{Key: db.statusKey(t.startTs), Value: v}}},
			&rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainPut{PlainPut: &rpcpb.PlainPutRequest{
				Key: db.stagingKey(t.startTs), Delete: true}}})
	}
	if len(staged) == 0 {
		return out
	}
	resps, err := db.sender.sendPoints(ctx, true, reqs)
	if err != nil {
		if db.ctx.Err() == nil {
			db.opts.Logger.Warn("canopy client: recording staged commits failed; readers will recover them",
				"transactions", len(staged), "err", err)
		}
		db.stats.resolveDropped.add(int64(len(staged)))
		return out
	}
	for i, t := range staged {
		p := resps[2*i].GetPlainPutUnlessExists()
		v := reqs[2*i].GetPlainPutUnlessExists().GetValue()
		if p == nil || !(p.GetSucceeded() || string(p.GetExisting()) == string(v)) {
			// Only recovery writes another value, and for an implicitly
			// committed transaction it writes the same COMMITTED.
			db.opts.Logger.Error("canopy client: a staged commit's status holds another value",
				"start_ts", t.startTs, "commit_ts", t.commitTs, "existing", p.GetExisting())
			continue
		}
		db.statuses.put(t.startTs, t.commitTs)
		out = append(out, t)
	}
	return out
}

// close stops accepting tasks and waits up to drainMax for the queue to
// drain; the caller then cancels db.ctx, which ends the rest quickly.
func (r *intentResolver) close(drainMax time.Duration) {
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		return
	}
	r.mu.closed = true
	close(r.queue)
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	t := time.NewTimer(drainMax)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		// Dropped tasks: workers see db.ctx cancelled and finish fast.
		r.db.cancel()
		<-done
	}
}
