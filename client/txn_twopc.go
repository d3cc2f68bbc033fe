package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// twoPCProtocol is the client side of 2pc-locking: client-coordinated
// two-phase commit over strict two-phase locking at the leaseholders, the
// thesis's baseline (seed 004, 3.6.1.B; docs/design-notes.md, "The 2PC +
// locking baseline"). Its stack, top down:
//
//  1. txnHeartbeater, started before the first locking read (readers that
//     meet our locks must see us alive) as well as before writes;
//  2. twoPCCoordinator: reads take shared locks (GetRequest.lock) and see
//     our buffered writes; writes are buffered; on opCommit it prepares
//     every range involved, in parallel (one Prepare per range: our
//     intents under exclusive locks, our reads' shared locks checked and
//     replicated: that range's yes vote), then hands opCommit down;
//  3. txnCommitter: commit_ts from the oracle, then put-unless-exists of
//     COMMITTED in the status table (the decision, durable before anyone
//     is told; I1), with the default protocol's settling of an unknown
//     outcome; opAbort writes ABORTED;
//  4. txnSpanRefresher: scans are the exception to locking (keys are
//     locked, not ranges of keys, so a lock could not keep an insert out
//     of a scanned span): a scan reads the snapshot at start_ts (with our
//     buffered writes laid over it) and its span is refreshed to
//     commit_ts at commit, as in the default protocol. Point reads hold
//     locks instead and are not refreshed;
//  5. txnWire.
//
// The second phase is Txn's aftermath: the intent resolver resolves every
// key written or read (the lock set), one ResolveIntent batch per range,
// which turns intents into versions at commit_ts (or removes them) and
// releases every lock. A coordinator that crashes after the decision
// leaves intents that readers resolve by the status table; one that
// crashes before leaves a pending transaction that readers abort with
// put-unless-exists once its heartbeat expires, and then resolve.
type twoPCProtocol struct{}

func (twoPCProtocol) stack(t *Txn) (txnLayer, *txnHeartbeater) {
	db := t.db
	var l txnLayer = &txnWire{t: t}
	l = newSpanRefresher(l, t.opts.Isolation == Serializable, false, db.opts.ReadSpansMax)
	l = &txnCommitter{next: l, startTs: t.startTs, abortTimeout: db.opts.AbortTimeout, logger: db.opts.Logger, stats: &db.stats,
		stepHook: db.opts.TestingCommitStep}
	l = newTwoPCCoordinator(l, t.startTs, twoPCTxn{
		addLock: t.addLock,
		cleanupKeys: func() [][]byte {
			t.mu.Lock()
			defer t.mu.Unlock()
			return t.cleanupKeysLocked()
		},
		resolved: func() { t.resolvedByProtocol.Store(true) },
	})
	hb := t.newHeartbeater(l)
	hb.onReads = true
	return hb, hb
}

// twoPCTxn is what the coordinator needs from its Txn (a fake in the step
// tests).
type twoPCTxn struct {
	// addLock records a key in the lock set before its locking read
	// leaves (Txn.addLock).
	addLock func(k []byte) error
	// cleanupKeys are the keys the second phase resolves: the write set
	// and the lock set.
	cleanupKeys func() [][]byte
	// resolved tells the Txn that the second phase resolved them all.
	resolved func()
}

// twoPCCoordinator is 2pc-locking's coordinator layer (see twoPCProtocol).
// It sends down: get with lock (the read), prepare (the first phase: the
// writes and the keys read), commit (to the committer: the decision),
// resolve-keys (the second phase), abort.
type twoPCCoordinator struct {
	next txnLayer
	txn  twoPCTxn

	mu struct {
		sync.Mutex
		// writes are the buffered writes, by key; order is first-write
		// order. Invariant: len(order) == len(writes).
		writes map[string]Write
		order  []string
		// reads are the keys read with a shared lock (not served from
		// writes), in first-read order; readSet indexes them.
		reads   [][]byte
		readSet map[string]bool
		// prepared: a Prepare may have been sent (intents may exist).
		prepared bool
		// scanned: a scan was sent (its span must be refreshed).
		scanned bool
	}
	// startTs is the transaction's start timestamp (a read-only
	// transaction without scans commits at it).
	startTs uint64
}

func newTwoPCCoordinator(next txnLayer, startTs uint64, txn twoPCTxn) *twoPCCoordinator {
	c := &twoPCCoordinator{next: next, txn: txn, startTs: startTs}
	c.mu.writes = map[string]Write{}
	c.mu.readSet = map[string]bool{}
	return c
}

func (c *twoPCCoordinator) send(ctx context.Context, r *txnReq) (*txnResp, error) {
	switch r.op {
	case opGet:
		c.mu.Lock()
		w, ok := c.mu.writes[string(r.key)]
		c.mu.Unlock()
		if ok {
			return &txnResp{value: w.Value, found: !w.Delete}, nil
		}
		return c.lockingGet(ctx, r.key)
	case opScan:
		return c.scan(ctx, r)
	case opWrite:
		c.mu.Lock()
		k := string(r.key)
		if _, ok := c.mu.writes[k]; !ok {
			c.mu.order = append(c.mu.order, k)
		}
		c.mu.writes[k] = Write{Key: r.key, Value: r.value, Delete: r.del}
		c.mu.Unlock()
		return &txnResp{}, nil
	case opCommit:
		c.mu.Lock()
		readOnly, scanned := len(c.mu.order) == 0, c.mu.scanned
		c.mu.Unlock()
		if readOnly {
			return c.commitReadOnly(ctx, scanned)
		}
		c.mu.Lock()
		c.mu.prepared = true
		p := &txnReq{op: opPrepare, keys: append([][]byte(nil), c.mu.reads...)}
		for _, k := range c.mu.order {
			p.writes = append(p.writes, c.mu.writes[k])
		}
		c.mu.Unlock()
		if _, err := c.next.send(ctx, p); err != nil {
			if errors.Is(err, ErrAmbiguous) {
				// Not the commit's outcome: a vote whose reply was lost.
				// The transaction has not committed; the abort cleans up.
				return nil, fmt.Errorf("%w: prepare outcome unknown; the transaction is not committed: %w", ErrUnavailable, err)
			}
			return nil, err
		}
		resp, err := c.next.send(ctx, r)
		if err == nil && !resp.implicit {
			c.commitPhase(ctx, resp.ts)
		}
		return resp, err
	case opAbort:
		c.mu.Lock()
		prepared := c.mu.prepared
		c.mu.Unlock()
		if !prepared {
			// No intent of ours can exist and nobody can commit us: no
			// record needed. Our shared locks are released by the
			// aftermath (ResolveIntent of the lock set).
			return &txnResp{d: decision{commitTs: txnstatus.Aborted}}, nil
		}
	}
	return c.next.send(ctx, r)
}

// commitReadOnly commits a transaction that wrote nothing: no status
// record. Its locked reads are current as long as their locks are held,
// but a lock lives only in its leaseholder's memory until a Prepare
// replicates it: a lease that moves (a node stopped, a leadership
// election) or a reader that aborts us (an expired heartbeat) drops it,
// and a writer may then overwrite the key. So unless its only read is one
// locked read (current when it was served, whatever happens after), the
// transaction first sends a Prepare of its read keys (no writes), which
// checks every lock is still held, as for a writing transaction's Prepare,
// and refuses with a retryable READ_CONFLICT if one was lost
// (TestTwoPCReadOnlyLostLock). Every read is then current at once, at the
// moment the last Prepare was checked. Its scans read the snapshot at
// start_ts, so they are refreshed to a fresh timestamp, which is then its
// commit timestamp (without scans it commits at start_ts). A transaction
// mixing a locked read (the latest value) with a scan of the same key at
// start_ts is consistent only if nothing changed in between: the refresh
// checks exactly that. Then its locks are released.
func (c *twoPCCoordinator) commitReadOnly(ctx context.Context, scanned bool) (*txnResp, error) {
	c.mu.Lock()
	reads := append([][]byte(nil), c.mu.reads...)
	if len(reads) > 1 || (len(reads) == 1 && scanned) {
		// opAbort must now clean up: our locks may be replicated.
		c.mu.prepared = true
	} else {
		reads = nil
	}
	c.mu.Unlock()
	if len(reads) > 0 {
		if _, err := c.next.send(ctx, &txnReq{op: opPrepare, keys: reads}); err != nil {
			if errors.Is(err, ErrAmbiguous) {
				return nil, fmt.Errorf("%w: check of the read locks' outcome unknown; the transaction is not committed: %w", ErrUnavailable, err)
			}
			return nil, err
		}
	}
	ts := c.startTs
	if scanned {
		tr, err := c.next.send(ctx, &txnReq{op: opTimestamp})
		if err != nil {
			return nil, err
		}
		ts = tr.ts
		if _, err := c.next.send(ctx, &txnReq{op: opRefresh, ts: ts}); err != nil {
			return nil, err
		}
	}
	c.commitPhase(ctx, ts)
	return &txnResp{ts: ts}, nil
}

// commitPhase is the second phase, once the decision is durable: every
// key written or read is resolved at commitTs (intents become versions,
// every lock is released), one ResolveIntent batch per range, in
// parallel, before the client is answered, as the thesis's coordinator
// waits for its participants' acknowledgements. Releasing the locks at
// once, rather than through the asynchronous resolver (whose queue lags
// under load), shortens the time others wait for them. If it fails, Txn's
// aftermath resolves them asynchronously instead (resolution is
// idempotent).
func (c *twoPCCoordinator) commitPhase(ctx context.Context, commitTs uint64) {
	if _, err := c.next.send(ctx, &txnReq{op: opResolveKeys, ts: commitTs, keys: c.txn.cleanupKeys()}); err == nil {
		c.txn.resolved()
	}
}

// lockingGet reads the latest committed value of k and takes the shared
// lock (the layer below resolves other transactions' intents it meets).
func (c *twoPCCoordinator) lockingGet(ctx context.Context, k []byte) (*txnResp, error) {
	// In the lock set before the request leaves: a lock taken by a read
	// whose reply is lost is still released after the decision.
	if err := c.txn.addLock(k); err != nil {
		return nil, err
	}
	resp, err := c.next.send(ctx, &txnReq{op: opGet, key: k, lock: true})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if !c.mu.readSet[string(k)] {
		c.mu.readSet[string(k)] = true
		c.mu.reads = append(c.mu.reads, k)
	}
	c.mu.Unlock()
	return resp, nil
}

// scan reads [r.key, r.end) at the snapshot (the layers below record the
// span for the refresh) and lays the buffered writes in the span over the
// result, in key order, cut to r.limit.
func (c *twoPCCoordinator) scan(ctx context.Context, r *txnReq) (*txnResp, error) {
	c.mu.Lock()
	c.mu.scanned = true
	var mine []Write
	for _, k := range c.mu.order {
		kb := []byte(k)
		if bytes.Compare(kb, r.key) >= 0 && (len(r.end) == 0 || bytes.Compare(kb, r.end) < 0) {
			mine = append(mine, c.mu.writes[k])
		}
	}
	c.mu.Unlock()
	if len(mine) == 0 {
		return c.next.send(ctx, r)
	}
	// Unlimited underneath: a buffered delete could otherwise leave fewer
	// than limit keys, and the refresher then records the whole span.
	sub := *r
	sub.limit = 0
	resp, err := c.next.send(ctx, &sub)
	if err != nil {
		return nil, err
	}
	byKey := map[string]*rpcpb.KeyValue{}
	for _, kv := range resp.kvs {
		byKey[string(kv.GetKey())] = kv
	}
	for _, w := range mine {
		if w.Delete {
			delete(byKey, string(w.Key))
		} else {
			byKey[string(w.Key)] = &rpcpb.KeyValue{Key: w.Key, Value: w.Value}
		}
	}
	kvs := make([]*rpcpb.KeyValue, 0, len(byKey))
	for _, kv := range byKey {
		kvs = append(kvs, kv)
	}
	slices.SortFunc(kvs, func(a, b *rpcpb.KeyValue) int { return bytes.Compare(a.GetKey(), b.GetKey()) })
	if r.limit > 0 && len(kvs) > r.limit {
		kvs = kvs[:r.limit]
	}
	return &txnResp{kvs: kvs}, nil
}

// The wire's side of 2pc-locking (txn_wire.go sends these here).

// lockingGet is the wire's get with lock: the latest committed value and
// the shared lock, resolving other transactions' intents met on the way.
func (w *txnWire) lockingGet(ctx context.Context, k []byte) (*txnResp, error) {
	t := w.t
	g, err := t.db.getWith(ctx, &rpcpb.GetRequest{Key: k, TxnStart: t.startTs, Lock: true}, t.waiter())
	if err != nil {
		return nil, err
	}
	return &txnResp{value: g.GetValue(), found: g.GetFound()}, nil
}

// prepareGroup is one range's part of the Prepare.
type prepareGroup struct {
	writes []*rpcpb.OnePCWrite
	reads  [][]byte
}

// firstKey is the key the group is routed by.
func (g *prepareGroup) firstKey() []byte {
	if len(g.writes) > 0 {
		return g.writes[0].Key
	}
	return g.reads[0]
}

// prepare sends every range involved its Prepare, in parallel, and
// returns nil once all voted yes. It counts the protocol's messages.
func (w *txnWire) prepare(ctx context.Context, writes []Write, reads [][]byte) error {
	ws := make([]*rpcpb.OnePCWrite, len(writes))
	for i, x := range writes {
		ws[i] = &rpcpb.OnePCWrite{Key: x.Key, Value: x.Value, Delete: x.Delete}
	}
	groups, err := w.groupPrepare(ctx, ws, reads)
	if err != nil {
		return err
	}
	errs := eachConcurrently(len(groups), func(i int) error { return w.prepareRange(ctx, groups[i], 0) })
	// Messages: a Prepare and a vote per participant, then (the second
	// phase) a commit or abort and its acknowledgement per participant:
	// 4N, formula 2.3 (2 for N = 1, where the thesis collapses the phases;
	// Canopy does not). Steps: 4 (2.2). The status-table write, absent
	// from the thesis's 2PC, is counted by neither, nor are the reads.
	st := &w.t.db.stats
	st.protocolTxns.add(1)
	st.protocolMessages.add(4 * int64(len(groups)))
	st.protocolSteps.add(4)
	return errors.Join(errs...)
}

// groupPrepare splits the writes and reads by range (cached descriptors).
func (w *txnWire) groupPrepare(ctx context.Context, ws []*rpcpb.OnePCWrite, reads [][]byte) ([]*prepareGroup, error) {
	s := w.t.db.sender
	byRange := map[uint64]*prepareGroup{}
	var out []*prepareGroup
	get := func(k []byte) (*prepareGroup, error) {
		e, err := s.lookup(ctx, k)
		if err != nil {
			return nil, err
		}
		g := byRange[e.desc.GetRangeId()]
		if g == nil {
			g = &prepareGroup{}
			byRange[e.desc.GetRangeId()] = g
			out = append(out, g)
		}
		return g, nil
	}
	for _, x := range ws {
		g, err := get(x.Key)
		if err != nil {
			return nil, err
		}
		g.writes = append(g.writes, x)
	}
	for _, k := range reads {
		g, err := get(k)
		if err != nil {
			return nil, err
		}
		g.reads = append(g.reads, k)
	}
	return out, nil
}

// prepareRange sends g's Prepare. A range that split meanwhile is
// regrouped; a lock held by another transaction (WRITE_CONFLICT naming it,
// after the leaseholder's own wait) is resolved by that transaction's
// status (waiting for a live one within the wait budget, aborting an
// abandoned one) and the Prepare sent again, at most IntentRoundsMax
// times.
func (w *txnWire) prepareRange(ctx context.Context, g *prepareGroup, depth int) error {
	t := w.t
	db := t.db
	for round := 0; ; round++ {
		_, _, err := db.sender.sendBatch(ctx, g.firstKey(), true, false, func(d *rpcpb.RangeDescriptor) ([]*rpcpb.RequestUnion, error) {
			e := &rangeEntry{desc: d}
			for _, x := range g.writes {
				if !e.contains(x.Key) {
					return nil, errRegroup
				}
			}
			for _, k := range g.reads {
				if !e.contains(k) {
					return nil, errRegroup
				}
			}
			return []*rpcpb.RequestUnion{{Value: &rpcpb.RequestUnion_Prepare{Prepare: &rpcpb.PrepareRequest{
				Txn: t.meta(), Writes: g.writes, Reads: g.reads}}}}, nil
		})
		if errors.Is(err, errRegroup) {
			if depth >= db.opts.SendAttemptsMax {
				return fmt.Errorf("%w: prepare still straddles ranges after %d regroupings (SendAttemptsMax)", ErrUnavailable, depth)
			}
			sub, gerr := w.groupPrepare(ctx, g.writes, g.reads)
			if gerr != nil {
				return gerr
			}
			errs := make([]error, len(sub))
			var wg sync.WaitGroup
			for i, sg := range sub {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = w.prepareRange(ctx, sg, depth+1) }()
			}
			wg.Wait()
			return errors.Join(errs...)
		}
		if pb, ok := asKVError(err, rpcpb.ErrorCode_WRITE_CONFLICT); ok && len(pb.GetIntents()) > 0 && round < db.opts.IntentRoundsMax {
			if rerr := db.resolveForeign(ctx, pb.GetIntents(), t.waiter()); rerr != nil {
				return rerr
			}
			continue
		}
		return err
	}
}
