package kvserver

import (
	"context"
	"errors"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/eval"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// The request path of 2pc-locking at the leaseholder (docs/design-notes.md,
// "The 2PC + locking baseline").
//
// Locking reads (GetRequest.lock): under the key's read latch, the read
// evaluates on a snapshot of the latest state (another transaction's
// intent: INTENT_FOUND, after a wait in the lock table as for any read),
// then, still under the latch, the transaction's shared lock is recorded
// in the range's lock table for the term in which the read was served. The
// latch keeps writers out between the read and the lock, so no write can
// slip in between. The lock lives only in memory: it costs no Raft round.
//
// Prepare: under write latches on every key, the leaseholder checks, in
// the current term's lock table, that the transaction still holds a lock
// on every key it read (a lock table is cleared whenever the range's
// leadership changes term, so a lock held there has been held since the
// read, by a leaseholder that was the only one), and that no other
// transaction holds a lock on a key it writes (else a WRITE_CONFLICT naming
// the holder, which withIntentWaits turns into a wait in the queue of that
// key, with deadlock detection); then evaluates (eval/cmd_prepare.go) and
// proposes. From the moment the Prepare applies, its shared locks are
// replicated (key records), so a later leaseholder refuses writers too.
//
// Why this is enough for serializability across lease moves: a read's lock
// is unreplicated only between the read and the Prepare, and Prepare
// refuses (READ_CONFLICT, the transaction retries) if it was lost in
// between, i.e. if any other leaseholder may have served a writer of the
// key meanwhile. From the Prepare on, every lock is in storage until the
// key is resolved. So each transaction holds, from each read until its
// decision, a lock that no leaseholder lets a conflicting writer past:
// strict two-phase locking, whose histories are serializable. Commit
// timestamps follow the lock order (a commit_ts is taken after every
// Prepare succeeded, and a conflicting transaction's locks were released
// only after its commit_ts was taken), so versions are in serial order.
//
// Set aside: replicating each shared lock at the read (one Raft round per
// read, for a protection that the check at Prepare gives for free), and
// keeping no lock at all between read and Prepare with a version check at
// Prepare instead (optimistic; the baseline is meant to lock).

// isLockingRead reports whether req is a batch of locking reads.
func isLockingRead(req *rpcpb.BatchRequest) bool {
	return req.Requests[0].GetGet().GetLock()
}

// isPrepare reports whether req is a Prepare batch.
func isPrepare(req *rpcpb.BatchRequest) bool {
	return req.Requests[0].GetPrepare() != nil
}

// validateTwoPC checks the shape of 2pc-locking batches: a Prepare alone
// in its batch; locking reads only with other locking reads of the same
// transaction, at ts 0.
func validateTwoPC(req *rpcpb.BatchRequest) *rpcpb.Error {
	lockTxn := uint64(0)
	for i, ru := range req.Requests {
		if ru.GetPrepare() != nil && len(req.Requests) > 1 {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "a Prepare must be alone in its batch")
		}
		g := ru.GetGet()
		locking := g.GetLock()
		if i > 0 && locking != isLockingRead(req) {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "locking reads cannot share a batch with other requests")
		}
		if !locking {
			continue
		}
		if g.GetTxnStart() == 0 || g.GetTs() != 0 {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "a locking read needs txn_start and ts 0 (it reads the latest value)")
		}
		if lockTxn != 0 && g.GetTxnStart() != lockTxn {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "locking reads of two transactions in one batch")
		}
		lockTxn = g.GetTxnStart()
	}
	return nil
}

// lockingReadOnce serves a batch of locking reads (see above).
func (n *Node) lockingReadOnce(ctx context.Context, rr *rangeReplica, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
	fail := func(e *rpcpb.Error) *rpcpb.BatchResponse { return &rpcpb.BatchResponse{Error: e} }
	var (
		term uint64
		g    *concurrency.LatchGuard
		snap *storage.Snapshot
	)
	e := n.leaseRead(ctx, rr, func(st replica.Status) (func(), *rpcpb.Error) {
		if !st.IsLeader {
			return nil, n.notLeaseholder(rr)
		}
		var err error
		if g, err = rr.latches.Acquire(ctx, eval.Declare(req, rr.sm.Desc())); err != nil {
			return nil, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "waiting for latches: %v", err)
		}
		term, snap = st.Term, n.eng.NewSnapshot()
		return func() { snap.Close(); rr.latches.Release(g) }, nil
	})
	if e != nil {
		return fail(e)
	}
	defer snap.Close()
	defer rr.latches.Release(g)
	gcThreshold, err := rr.sm.gcThreshold()
	if err != nil {
		return fail(pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err))
	}
	resp := eval.EvalRead(eval.Context{Desc: rr.sm.Desc(), GCThreshold: gcThreshold}, snap, req)
	if resp.Error != nil {
		return resp
	}
	ks := make([][]byte, len(req.Requests))
	for i, ru := range req.Requests {
		ks[i] = ru.GetGet().GetKey()
	}
	if e := rr.acquireShared(term, concurrency.TxnID(req.Requests[0].GetGet().GetTxnStart()), ks); e != nil {
		return fail(e)
	}
	return resp
}

// acquireShared records txn's shared locks on ks in the lock table of
// term, under the read's latches. A table of a later term means the read
// was served by a leaseholder that has since lost its lease: refused
// (UNAVAILABLE: the client reads again, at the new leaseholder).
func (rr *rangeReplica) acquireShared(term uint64, txn concurrency.TxnID, ks [][]byte) *rpcpb.Error {
	rr.locks.mu.Lock()
	defer rr.locks.mu.Unlock()
	if rr.locks.term > term {
		return pbErr(rpcpb.ErrorCode_UNAVAILABLE, "range r%d: leadership changed term while the locking read ran", rr.r.RangeID())
	}
	if rr.locks.term < term {
		rr.locks.table.Clear(errLeaseChanged)
		rr.locks.term = term
	}
	t := rr.locks.table
	for _, k := range ks {
		err := t.Acquire(txn, k, concurrency.Shared)
		var ce *concurrency.ConflictError
		if errors.As(err, &ce) {
			// The read found no intent of another transaction, under a
			// latch that keeps writes out: the table's exclusive holders
			// are stale (their intents are resolved).
			for _, h := range ce.Holders {
				t.Release(h, k)
			}
			err = t.Acquire(txn, k, concurrency.Shared)
		}
		if err != nil {
			return pbErr(rpcpb.ErrorCode_UNAVAILABLE, "range r%d: taking the shared lock of %q: %v", rr.r.RangeID(), k, err)
		}
	}
	return nil
}

// holderConflict is the conflict with lock holder h at key k, with code:
// its intent names h (marked shared for a shared lock), so that
// withIntentWaits waits for it in the key's queue and the client resolves
// it by h's status.
func holderConflict(code rpcpb.ErrorCode, k []byte, h concurrency.HolderInfo) *rpcpb.Error {
	e := pbErr(code, "transaction %d holds a %s lock at %q", h.Txn, h.Strength, k)
	e.Intents = []*rpcpb.Intent{{Key: k, Txn: &rpcpb.TxnMeta{StartTs: uint64(h.Txn), HeartbeatKey: keys.HeartbeatKey(uint64(h.Txn))},
		Shared: h.Strength == concurrency.Shared}}
	return e
}

// prepareCheck is the check a Prepare makes in the lock table under its
// latches, before it evaluates (see above).
func prepareCheck(p *rpcpb.PrepareRequest) func(*concurrency.LockTable) *rpcpb.Error {
	return func(t *concurrency.LockTable) *rpcpb.Error {
		txn := concurrency.TxnID(p.GetTxn().GetStartTs())
		for _, k := range p.GetReads() {
			if t.Held(txn, k) == 0 {
				return pbErr(rpcpb.ErrorCode_READ_CONFLICT, "transaction %d no longer holds the shared lock its read of %q took: the range's leadership changed since (or it split); it must read again", txn, k)
			}
		}
		for _, w := range p.GetWrites() {
			hs := t.Conflicting(txn, w.GetKey(), concurrency.Exclusive)
			if len(hs) == 0 {
				continue
			}
			return holderConflict(rpcpb.ErrorCode_WRITE_CONFLICT, w.GetKey(), hs[0])
		}
		return nil
	}
}

// Non-transactional writes (Put) on a 2pc-locking cluster wait for the
// shared locks of keys that transactions have read, as a Prepare's writes
// do: before a Prepare, the lock is in the lock table (putCheck, under the
// Put's latches); after it, in the key record (eval's Context.SharedLocks).
// A conflict is INTENT_FOUND naming the holder, which withIntentWaits
// turns into a wait in the key's queue, and which the client, if the wait
// ends first, resolves by the holder's status like an intent. The Put's
// timestamp is taken after the check, so it lands above the commit
// timestamp of every transaction whose read it waited for: without the
// wait, a transaction that read the key could commit above a Put it did
// not see (a cycle with any reader of both).

// hasPut reports whether req holds a non-transactional Put.
func hasPut(req *rpcpb.BatchRequest) bool {
	for _, ru := range req.Requests {
		if ru.Method() == rpcpb.MethodPut {
			return true
		}
	}
	return false
}

// putCheck is the lock-table check of a batch of Puts (see above).
func putCheck(req *rpcpb.BatchRequest) func(*concurrency.LockTable) *rpcpb.Error {
	return func(t *concurrency.LockTable) *rpcpb.Error {
		for _, ru := range req.Requests {
			if ru.Method() != rpcpb.MethodPut {
				continue
			}
			k := ru.GetPut().GetKey()
			// Shared holders only: an exclusive holder is an intent, which
			// the evaluation finds in storage (a holder the table still
			// lists after its intent was resolved would only delay the Put).
			for _, h := range t.Conflicting(0, k, concurrency.Exclusive) {
				if h.Strength != concurrency.Shared {
					continue
				}
				return holderConflict(rpcpb.ErrorCode_INTENT_FOUND, k, h)
			}
		}
		return nil
	}
}

// putOnceTwoPC evaluates and proposes a batch of Puts after putCheck.
func (n *Node) putOnceTwoPC(ctx context.Context, rr *rangeReplica, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
	return n.writeOnceChecked(ctx, rr, req, putCheck(req))
}

// prepareOnce evaluates and proposes a Prepare batch after prepareCheck.
func (n *Node) prepareOnce(ctx context.Context, rr *rangeReplica, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
	return n.writeOnceChecked(ctx, rr, req, prepareCheck(req.Requests[0].GetPrepare()))
}
