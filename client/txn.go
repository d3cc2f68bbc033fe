package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// Txn is an interactive transaction of the default protocol (DESIGN.md):
// reads at start_ts, writes as intents, a commit decided by one
// put-unless-exists in the status table. Its methods may be called from
// several goroutines; operations then run concurrently.
//
// Txn is the top of the transaction's coordinator, a stack of layers
// (txn_layers.go: heartbeater, sequence numbers, pipeliner, committer,
// span refresher, wire). Txn
// itself checks arguments and limits, and keeps what outlives the layers:
//
//   - the state (pending, committing, decided), and the poison: a
//     retryable error (conflict) makes every later operation and Commit
//     return it, and only Rollback remains;
//   - the write set, recorded before a write goes down the stack, so that
//     an intent whose write failed ambiguously is still resolved after the
//     decision;
//   - the decision's aftermath: the intents and heartbeat record are
//     cleaned up asynchronously (intentResolver).
type Txn struct {
	db           *DB
	opts         TxnOptions
	protocol     Protocol
	startTs      uint64
	heartbeatKey []byte

	// stack is the top layer of the coordinator; hb is its heartbeater,
	// asked at the decision whether a record may exist.
	stack txnLayer
	hb    *txnHeartbeater

	// opMu orders operations before the decision: every operation holds it
	// shared while it runs, and Commit and Rollback take it exclusively to
	// leave the pending state. So no write lands after Commit has taken
	// the write set (its intent would never be resolved by us), and no
	// read is recorded after the refresh has taken the read set.
	opMu sync.RWMutex

	mu struct {
		sync.Mutex
		state txnState
		// err, once set, is what every later operation returns.
		err error
		// writes is the write set, logical keys; writeKeys holds them in
		// first-write order. Invariant: len(writeKeys) == len(writes) <=
		// Options.TxnKeysMax.
		writes    map[string]struct{}
		writeKeys [][]byte
		// lockKeys: keys, outside the write set, at which the
		// transaction may hold a lock (2pc-locking's shared read locks),
		// recorded before the request that takes it is sent (addLock);
		// released with the write set after the decision. Invariant:
		// disjoint from writes; len(lockKeys) <= Options.TxnKeysMax.
		lockKeys [][]byte
		locks    map[string]struct{}
		// onePCSent: a one-phase commit was sent (txn_onepc.go), so an
		// abort must ask its range, not skip the stack for lack of writes.
		onePCSent bool
		// commitTs: the commit timestamp once committed (CommitTs).
		commitTs uint64
		// hierSent: a hierarchy commit sent its parts (txn_hierarchy.go),
		// so an abort must be recorded in the status table.
		hierSent bool
	}
	// hier is set when the cluster runs a hierarchy protocol
	// (txn_hierarchy.go): reads, writes and the commit go there.
	hier *hierTxn
	// onePC: one-phase commit is allowed (switches, read at Begin).
	onePC bool
	// resolvedByProtocol: the protocol resolved every key of the write
	// and lock sets itself after the decision (2pc-locking's second
	// phase), so finish queues no resolution of them.
	resolvedByProtocol atomic.Bool
}

type txnState int

const (
	txnPending txnState = iota
	txnCommitting
	txnCommitted
	txnAborted
	// txnUnknown: Commit returned ErrAmbiguous.
	txnUnknown
)

func (s txnState) String() string {
	return [...]string{"pending", "committing", "committed", "aborted", "of unknown outcome"}[s]
}

// Begin starts a transaction. The caller must end it with Commit or
// Rollback; DB.Txn does that (and retries) for you.
func (db *DB) Begin(ctx context.Context, opts ...TxnOption) (*Txn, error) {
	var o TxnOptions
	for _, f := range opts {
		f(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	return db.begin(ctx, o)
}

func (db *DB) begin(ctx context.Context, o TxnOptions) (*Txn, error) {
	p := o.Protocol
	if p == "" {
		p = db.Protocol()
	}
	impl, err := protocolFor(p)
	if err != nil {
		return nil, err
	}
	ts, err := db.startTimestamp(ctx)
	if err != nil {
		return nil, err
	}
	// A hierarchy commit timestamp is a leaf's, which may be a little
	// above the oracle's latest: the next transaction of the same client
	// waits for the oracle to pass it (at most about a millisecond of the
	// oracle's clock), so that it reads what this client committed.
	for i := 0; i < hierBeginRoundsMax && ts <= db.hierCommitted.Load(); i++ {
		if ts, err = db.startTimestamp(ctx); err != nil {
			return nil, err
		}
	}
	t := &Txn{db: db, opts: o, protocol: p, startTs: ts, heartbeatKey: keys.HeartbeatKey(ts)}
	t.mu.writes = map[string]struct{}{}
	t.buildStack(impl)
	if isHierarchy(p) {
		t.hier = newHierTxn()
	}
	return t, nil
}

// startTimestamp draws a transaction's start timestamp from the oracle and
// makes sure the status encoding schedule is valid through it, before the
// transaction writes anything (status_schedule.go). A timestamp whose keys
// collide with another era's (txnstatus.Schedule.Collides) is not used:
// another is drawn.
func (db *DB) startTimestamp(ctx context.Context) (uint64, error) {
	for range StatusBeginAttemptsMax {
		ts, err := db.oracle.timestamp(ctx)
		if err != nil {
			return 0, err
		}
		if !db.schedule.enabled {
			return ts, nil
		}
		if err := db.ensureSchedule(ctx, true, ts); err != nil {
			return 0, err
		}
		if s := db.schedule.cur.Load().s; len(s.Eras) == 1 || !s.Collides(ts) {
			return ts, nil
		}
		db.opts.Logger.Debug("canopy client: start timestamp collides with another status encoding era's keys; drawing another", "start_ts", ts)
	}
	return 0, fmt.Errorf("%w: %d start timestamps in a row collide with another status encoding era's keys", ErrInternal, StatusBeginAttemptsMax)
}

// buildStack assembles the coordinator of the transaction's protocol
// (protocol.go).
func (t *Txn) buildStack(impl commitProtocol) {
	t.stack, t.hb = impl.stack(t)
}

// newHeartbeater returns the heartbeater every protocol puts on top of its
// stack, over next.
func (t *Txn) newHeartbeater(next txnLayer) *txnHeartbeater {
	db := t.db
	return newHeartbeater(next, heartbeatConfig{
		startTs: t.startTs, ttl: db.opts.HeartbeatTTL, lifetimeMax: db.opts.TxnLifetimeMax,
		clock: db.opts.Clock, logger: db.opts.Logger, bg: db.ctx,
		putRecord: func(ctx context.Context, expiry time.Time) error {
			return db.plainPut(ctx, t.heartbeatKey, heartbeatValue(expiry), false)
		},
	})
}

// Protocol is the transaction's commit protocol.
func (t *Txn) Protocol() Protocol { return t.protocol }

// StartTs is the transaction's start timestamp: it reads the snapshot at
// this timestamp.
func (t *Txn) StartTs() uint64 { return t.startTs }

// CommitTs is the transaction's commit timestamp once it has committed
// (0 before, or if it did not): its writes are versions at it, and a watch
// reports them with it. A read-only transaction "commits" at StartTs.
func (t *Txn) CommitTs() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.commitTs
}

// waiter identifies the transaction when it waits for others' intents.
func (t *Txn) waiter() waiter {
	t.mu.Lock()
	defer t.mu.Unlock()
	return waiter{startTs: t.startTs, holdsIntents: len(t.mu.writeKeys)+len(t.mu.lockKeys) > 0}
}

// meta is the transaction's identity in intents.
func (t *Txn) meta() *rpcpb.TxnMeta {
	return &rpcpb.TxnMeta{StartTs: t.startTs, HeartbeatKey: t.heartbeatKey}
}

// usable returns the error that stops a new operation, if any.
func (t *Txn) usable() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.state != txnPending {
		return invalidArgf("transaction %d is %s", t.startTs, t.mu.state)
	}
	return t.mu.err
}

// fail records a retryable error as the transaction's fate and returns
// the error as the caller should see it.
func (t *Txn) fail(err error) error {
	err = publicError(err)
	if errors.Is(err, ErrAmbiguous) {
		// A write whose outcome is unknown: the intent may exist. It is in
		// the write set, so the decision cleans it up either way; the
		// transaction itself has not committed.
		err = fmt.Errorf("%w: write outcome unknown; transaction %d is not committed: %w", ErrUnavailable, t.startTs, err)
	}
	if errors.Is(err, ErrRetryable) {
		t.mu.Lock()
		if t.mu.err == nil {
			t.mu.err = err
		}
		t.mu.Unlock()
	}
	return err
}

// send sends r down the coordinator's stack, under a context that names
// the transaction's protocol to the server (protocol.go).
func (t *Txn) send(ctx context.Context, r *txnReq) (*txnResp, error) {
	return t.stack.send(ctxWithProtocol(ctx, t.protocol), r)
}

// addLock adds k to the lock set unless it is in the write set, enforcing
// TxnKeysMax over both.
func (t *Txn) addLock(k []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.mu.writes[string(k)]; ok {
		return nil
	}
	if _, ok := t.mu.locks[string(k)]; ok {
		return nil
	}
	if n := len(t.mu.writeKeys) + len(t.mu.lockKeys); n >= t.db.opts.TxnKeysMax {
		return invalidArgf("transaction locks %d keys, above the limit TxnKeysMax=%d", n+1, t.db.opts.TxnKeysMax)
	}
	if t.mu.locks == nil {
		t.mu.locks = map[string]struct{}{}
	}
	t.mu.locks[string(k)] = struct{}{}
	t.mu.lockKeys = append(t.mu.lockKeys, k)
	return nil
}

// cleanupKeysLocked returns every key whose intent or lock the
// transaction's decision must resolve: the write set, then the lock set
// (minus keys written since they were locked). t.mu must be held.
func (t *Txn) cleanupKeysLocked() [][]byte {
	if len(t.mu.lockKeys) == 0 {
		return t.mu.writeKeys
	}
	ks := append([][]byte(nil), t.mu.writeKeys...)
	for _, k := range t.mu.lockKeys {
		if _, w := t.mu.writes[string(k)]; !w {
			ks = append(ks, k)
		}
	}
	return ks
}

// addWrite adds k to the write set, enforcing TxnKeysMax.
func (t *Txn) addWrite(k []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.mu.writes[string(k)]; ok {
		return nil
	}
	if n := len(t.mu.writeKeys); n >= t.db.opts.TxnKeysMax {
		return invalidArgf("transaction writes %d keys, above the limit TxnKeysMax=%d", n+1, t.db.opts.TxnKeysMax)
	}
	t.mu.writes[string(k)] = struct{}{}
	t.mu.writeKeys = append(t.mu.writeKeys, k)
	return nil
}

// Get reads key in the transaction's snapshot (and its own writes). It
// returns the value and whether the key exists.
func (t *Txn) Get(ctx context.Context, key []byte) ([]byte, bool, error) {
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	t.opMu.RLock()
	defer t.opMu.RUnlock()
	if err := t.usable(); err != nil {
		return nil, false, err
	}
	if t.hier != nil {
		return t.hierGet(ctx, keys.UserKey(key))
	}
	r, err := t.send(ctx, &txnReq{op: opGet, key: keys.UserKey(key)})
	if err != nil {
		return nil, false, t.fail(err)
	}
	return r.value, r.found, nil
}

// Scan reads [start, end) in the transaction's snapshot (and its own
// writes), in key order, at most limit keys (0: all, up to
// Options.ScanKeysMax). An empty end means the end of the keyspace.
func (t *Txn) Scan(ctx context.Context, start, end []byte, limit int) ([]KeyValue, error) {
	ls, le, err := t.db.checkScan(start, end, limit)
	if err != nil {
		return nil, err
	}
	t.opMu.RLock()
	defer t.opMu.RUnlock()
	if err := t.usable(); err != nil {
		return nil, err
	}
	if t.hier != nil {
		return t.hierScan(ctx, ls, le, limit)
	}
	r, err := t.send(ctx, &txnReq{op: opScan, key: ls, end: le, limit: limit})
	if err != nil {
		return nil, t.fail(err)
	}
	return userKVs(r.kvs)
}

// Put writes key = value in the transaction.
func (t *Txn) Put(ctx context.Context, key, value []byte) error {
	if err := checkValue(value); err != nil {
		return err
	}
	return t.write(ctx, key, value, false)
}

// Delete deletes key in the transaction.
func (t *Txn) Delete(ctx context.Context, key []byte) error {
	return t.write(ctx, key, nil, true)
}

func (t *Txn) write(ctx context.Context, key, value []byte, del bool) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return t.writeLogical(ctx, keys.UserKey(key), value, del)
}

// writeLogical writes logical key k (checked by the caller).
func (t *Txn) writeLogical(ctx context.Context, k, value []byte, del bool) error {
	t.opMu.RLock()
	defer t.opMu.RUnlock()
	if err := t.usable(); err != nil {
		return err
	}
	if t.hier != nil {
		return t.hierWrite(k, value, del)
	}
	if err := t.addWrite(k); err != nil {
		return err
	}
	_, err := t.send(ctx, &txnReq{op: opWrite, key: k, value: value, del: del})
	return t.fail(err)
}

// Rollback aborts the transaction: it writes "aborted" in the status table
// (unless the transaction wrote nothing) and cleans up its intents
// asynchronously. Rolling back a finished transaction is a no-op, so
// `defer txn.Rollback(ctx)` after Begin is fine.
func (t *Txn) Rollback(ctx context.Context) error {
	t.opMu.Lock()
	t.mu.Lock()
	s := t.mu.state
	if s == txnPending || s == txnUnknown {
		t.mu.state = txnCommitting
	}
	t.mu.Unlock()
	t.opMu.Unlock()
	if s != txnPending && s != txnUnknown {
		return nil
	}
	d, err := t.abort(ctx)
	if err != nil {
		if s == txnUnknown {
			// The ambiguous commit may still have applied.
			t.setState(txnUnknown)
		}
		return err
	}
	if !d.aborted() {
		// Only after an ambiguous Commit: it had committed after all.
		return invalidArgf("transaction %d cannot roll back: it committed at %d", t.startTs, d.commitTs)
	}
	return nil
}

// abort records the transaction as aborted (put-unless-exists; the
// existing decision wins if there is one), then finishes it. It runs on a
// context detached from ctx's cancellation, bounded by AbortTimeout, since
// it is cleanup the caller's deadline should not prevent.
func (t *Txn) abort(ctx context.Context) (decision, error) {
	t.mu.Lock()
	wrote := len(t.mu.writeKeys) > 0 || t.mu.onePCSent
	hierSent := t.mu.hierSent
	t.mu.Unlock()
	if t.hier != nil {
		if !hierSent {
			t.finish(ctx, decision{})
			return decision{}, nil
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.db.opts.AbortTimeout)
		defer cancel()
		d, err := t.db.abortTxn(actx, t.startTs)
		if err != nil {
			return decision{}, publicError(err)
		}
		t.finish(actx, d)
		return d, nil
	}
	if !wrote && !t.hb.written() {
		// Nothing to record: finish releases any locks of reads.
		t.finish(ctx, decision{})
		return decision{}, nil
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.db.opts.AbortTimeout)
	defer cancel()
	r, err := t.send(actx, &txnReq{op: opAbort})
	if err != nil {
		// Not decided: stop heartbeating, so that others abort it once the
		// record expires. It does not commit: no commit point was applied
		// (callers after an ambiguous commit restore txnUnknown) and we
		// make no further attempt.
		t.hb.stop()
		t.setState(txnAborted)
		t.db.stats.aborts.add(1)
		return decision{}, publicError(err)
	}
	t.finish(actx, r.d)
	return r.d, nil
}

// committed reports whether the transaction has committed.
func (t *Txn) committed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.state == txnCommitted
}

func (t *Txn) setState(s txnState) {
	t.mu.Lock()
	t.mu.state = s
	t.mu.Unlock()
}

// finish records the decision, stops the heartbeat and queues the cleanup.
func (t *Txn) finish(ctx context.Context, d decision) {
	t.mu.Lock()
	if d.aborted() {
		t.mu.state = txnAborted
	} else {
		t.mu.state = txnCommitted
		t.mu.commitTs = d.commitTs
	}
	ks := t.cleanupKeysLocked()
	wroteAny := len(t.mu.writeKeys) > 0
	t.mu.Unlock()
	if t.resolvedByProtocol.Load() {
		ks = nil
	}
	if d.aborted() {
		t.db.stats.aborts.add(1)
	} else {
		t.db.stats.commits.add(1)
		if wroteAny {
			// Recorded by a put-unless-exists that succeeded (or read
			// back): final. (An abort is cached by abortTxn, once written.)
			t.db.statuses.put(t.startTs, d.commitTs)
		}
	}
	written, done := t.hb.stop()
	if len(ks) == 0 && !written {
		return
	}
	task := resolveTask{startTs: t.startTs, commitTs: d.commitTs, keys: ks, heartbeatDone: done}
	if written {
		task.heartbeatKey = t.heartbeatKey
	}
	t.db.resolver.enqueue(ctx, task)
}

// finishStaged is finish for an implicit commit (parallel commits): the
// COMMITTED status is not recorded yet, so it is not cached here, and the
// cleanup task records it before it resolves any intent (recordStaged).
func (t *Txn) finishStaged(ctx context.Context, commitTs uint64) {
	t.mu.Lock()
	t.mu.state = txnCommitted
	t.mu.commitTs = commitTs
	ks := t.mu.writeKeys
	t.mu.Unlock()
	t.db.stats.commits.add(1)
	written, done := t.hb.stop()
	task := resolveTask{startTs: t.startTs, commitTs: commitTs, keys: ks, heartbeatDone: done, staged: true}
	if written {
		task.heartbeatKey = t.heartbeatKey
	}
	t.db.resolver.enqueue(ctx, task)
}

// Txn runs fn in a transaction and commits it, retrying the whole
// transaction (a new Txn with a new start_ts) when fn or the commit returns
// an error wrapping ErrRetryable, with exponential backoff and jitter, at
// most Options.TxnAttemptsMax times (or WithAttemptsMax).
//
// fn must not have effects outside the transaction that a rerun would
// repeat wrongly. It may return an error: the transaction is rolled back
// and the error returned (retried only if it wraps ErrRetryable).
//
// Txn returns nil exactly when the transaction committed. After a commit
// whose outcome was unknown it looks the transaction up in the status table
// (writing "aborted" if there is no record yet) and never reruns fn before
// it knows the first run aborted; ErrAmbiguous means that lookup itself
// could not complete.
func (db *DB) Txn(ctx context.Context, fn func(ctx context.Context, txn *Txn) error, opts ...TxnOption) error {
	var o TxnOptions
	for _, f := range opts {
		f(&o)
	}
	if err := o.validate(); err != nil {
		return err
	}
	attemptsMax := db.opts.TxnAttemptsMax
	if o.AttemptsMax > 0 {
		attemptsMax = o.AttemptsMax
	}
	bo := newBackoff(db.opts.TxnBackoffInitial, db.opts.TxnBackoffMax)
	var lastErr error
	for attempt := 1; attempt <= attemptsMax; attempt++ {
		if attempt > 1 {
			db.stats.countRetry(lastErr) // metrics.go
			if err := sleepCtx(ctx, bo.next()); err != nil {
				return fmt.Errorf("canopy: transaction abandoned after %d attempts: %w (last attempt: %w)", attempt-1, err, lastErr)
			}
		}
		t, err := db.begin(ctx, o)
		if err != nil {
			return err
		}
		err = t.runAttempt(ctx, fn)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrRetryable) {
			return err
		}
		lastErr = err
	}
	return fmt.Errorf("canopy: transaction gave up after %d attempts (TxnAttemptsMax): %w", attemptsMax, lastErr)
}

func (t *Txn) runAttempt(ctx context.Context, fn func(ctx context.Context, txn *Txn) error) error {
	done := false
	defer func() {
		if !done {
			// fn panicked: abort, then let the panic go on.
			_ = t.Rollback(ctx)
		}
	}()
	err := fn(ctx, t)
	done = true
	if err == nil && t.committed() {
		return nil // fn ended with CommitWith
	}
	if err != nil {
		// Best effort: if the abort fails, the heartbeat stops and others
		// abort the transaction once its record expires.
		_ = t.Rollback(ctx)
		return err
	}
	return t.Commit(ctx)
}
