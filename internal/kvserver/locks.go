package kvserver

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/eval"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// Waiting for intents at the leaseholder.
//
// Each range's leaseholder mirrors the intents it knows of in a lock table
// (concurrency.LockTable): an intent enters it when the PutIntent that
// wrote it applies here, or when a request meets it in storage
// (AddDiscovered); it leaves when its ResolveIntent applies here. A request
// whose evaluation meets another transaction's intent releases its latches
// and waits in that key's queue until the intent is resolved (it is then
// woken, in queue order, and evaluates again) or Config.LockWaitMax passes (it then
// returns the conflict to its client, which looks up the intent's
// transaction, and pushes it if its heartbeat has expired, as before).
// Waits form a waits-for graph, shared by the node's ranges
// (concurrency.Detector); a cycle is broken at once by failing the
// youngest transaction in it with DEADLOCK, instead of every member waiting
// out its budget.
//
// The table is an accelerator, never the truth: storage decides every
// conflict, so a lock the table misses costs a client round and a stale one
// at most a LockWaitMax wait. It is cleared when the leadership changes
// term (another leader may have resolved intents meanwhile).

// Limits of waiting for intents.
const (
	// DefaultLockWaitMax is Config.LockWaitMax's default. Short, because
	// the intent of a transaction that has committed is resolved by its
	// client asynchronously: a waiter then gains nothing by waiting long,
	// while its client, told of the conflict, reads the status and resolves
	// the intent itself at once. (With 500 ms, the p99 of 2-key
	// transactions at 64 clients went from about 0.5 s to 1.4 s.)
	DefaultLockWaitMax = 50 * time.Millisecond
	// LockWaitsMax bounds the waits of one request before it returns the
	// conflict to its client.
	LockWaitsMax = 4
)

var errLeaseChanged = errors.New("kvserver: the range's leadership changed term")

// rangeLocks is a range's lock table and the term it belongs to.
type rangeLocks struct {
	mu    sync.Mutex
	term  uint64
	table *concurrency.LockTable
}

// lockTable returns the range's lock table for term, clearing it first if
// it belonged to another term.
func (rr *rangeReplica) lockTable(term uint64) *concurrency.LockTable {
	rr.locks.mu.Lock()
	defer rr.locks.mu.Unlock()
	if rr.locks.term != term {
		rr.locks.table.Clear(errLeaseChanged)
		rr.locks.term = term
	}
	return rr.locks.table
}

// applyLockEffects records an applied write's intents in the lock table.
func applyLockEffects(t *concurrency.LockTable, fx eval.Effects) {
	for _, l := range fx.Unlocked {
		t.Release(concurrency.TxnID(l.Txn), l.Key)
	}
	for _, l := range fx.Locked {
		s := l.Strength
		if s == 0 {
			s = concurrency.Exclusive
		}
		err := t.Acquire(concurrency.TxnID(l.Txn), l.Key, s)
		var ce *concurrency.ConflictError
		if errors.As(err, &ce) {
			// Storage let the intent (or shared lock) be written, so the
			// table's conflicting holders are stale: their locks are gone.
			for _, h := range ce.Holders {
				t.Release(h, l.Key)
			}
			_ = t.Acquire(concurrency.TxnID(l.Txn), l.Key, s)
		}
	}
}

// conflictOf returns the first intent a failed evaluation met, if any.
func conflictOf(e *rpcpb.Error) *rpcpb.Intent {
	switch e.GetCode() {
	case rpcpb.ErrorCode_WRITE_CONFLICT, rpcpb.ErrorCode_INTENT_FOUND, rpcpb.ErrorCode_READ_CONFLICT:
		if len(e.Intents) > 0 && e.Intents[0].GetTxn().GetStartTs() != 0 {
			return e.Intents[0]
		}
	}
	return nil
}

// batchTxn returns the transaction (start timestamp) on whose behalf the
// batch runs, 0 if none.
func batchTxn(req *rpcpb.BatchRequest) uint64 {
	for _, ru := range req.Requests {
		switch {
		case ru.GetPutIntent() != nil:
			return ru.GetPutIntent().GetTxn().GetStartTs()
		case ru.GetCommitOnePc() != nil:
			return ru.GetCommitOnePc().GetTxnStart()
		case ru.GetPrepare() != nil:
			return ru.GetPrepare().GetTxn().GetStartTs()
		case ru.GetGet() != nil && ru.GetGet().TxnStart != 0:
			return ru.GetGet().TxnStart
		case ru.GetScan() != nil && ru.GetScan().TxnStart != 0:
			return ru.GetScan().TxnStart
		}
	}
	return 0
}

// waitForIntent waits until the intent in is resolved, LockWaitMax passes,
// or the waiter is chosen to break a deadlock. It returns true if the
// request should evaluate again, false if it should return its conflict,
// and a DEADLOCK error for a victim.
func (n *Node) waitForIntent(ctx context.Context, rr *rangeReplica, waiter uint64, in *rpcpb.Intent, s concurrency.Strength) (bool, *rpcpb.Error) {
	st := rr.r.Status()
	if !st.IsLeader {
		return false, nil
	}
	t := rr.lockTable(st.Term)
	holder := concurrency.TxnID(in.GetTxn().GetStartTs())
	if holder == concurrency.TxnID(waiter) {
		return false, nil
	}
	held := concurrency.Exclusive
	if in.GetShared() {
		held = concurrency.Shared // a 2pc-locking reader's lock, not an intent
	}
	t.AddDiscovered(holder, in.Key, held)
	w, err := t.Enqueue(concurrency.TxnID(waiter), in.Key, s)
	if err != nil {
		return false, nil // a limit: the client handles the conflict
	}
	if w == nil {
		return true, nil // gone meanwhile
	}
	wctx, cancel := context.WithTimeout(ctx, n.cfg.LockWaitMax)
	err = t.Wait(wctx, w)
	cancel()
	t.Dequeue(w)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, concurrency.ErrDeadlock):
		return false, pbErr(rpcpb.ErrorCode_DEADLOCK, "transaction %d waited for the intent of transaction %d at %q in a cycle of waits; it is the youngest, so it gives way", waiter, holder, in.Key)
	}
	return false, nil
}

// withIntentWaits runs once (readOnce or writeOnce), and while its
// evaluation meets another transaction's intent, waits at the leaseholder
// for that intent to be resolved (with strength s: shared for reads,
// exclusive for writes) and runs it again, at most LockWaitsMax times.
func (n *Node) withIntentWaits(ctx context.Context, rr *rangeReplica, req *rpcpb.BatchRequest, s concurrency.Strength,
	once func(context.Context, *rangeReplica, *rpcpb.BatchRequest) *rpcpb.BatchResponse) *rpcpb.BatchResponse {
	for waits := 0; ; waits++ {
		resp := once(ctx, rr, req)
		in := conflictOf(resp.Error)
		if in == nil || waits >= LockWaitsMax {
			return resp
		}
		again, e := n.waitForIntent(ctx, rr, batchTxn(req), in, s)
		if e != nil {
			return &rpcpb.BatchResponse{Error: e}
		}
		if !again {
			return resp
		}
	}
}

// LockWaiters returns the number of requests waiting for intents in the
// node's lock tables (for status and tests).
func (n *Node) LockWaiters() int {
	total := 0
	for _, rr := range n.replicaList() {
		_, w := rr.locks.table.Len()
		total += w
	}
	return total
}

// AsyncProposalsMax bounds the proposals of pipelined writes (answered
// before they apply) in flight on one range; past it a pipelined write is
// answered once it applies, like any write (back-pressure).
const AsyncProposalsMax = 1024

// asyncLimit counts a range's pipelined proposals in flight (zero value
// ready to use).
type asyncLimit struct{ n atomic.Int64 }

// TryAcquire takes a unit if fewer than AsyncProposalsMax are taken.
func (s *asyncLimit) TryAcquire() bool {
	if s.n.Add(1) > AsyncProposalsMax {
		s.n.Add(-1)
		return false
	}
	return true
}

// Release returns a unit.
func (s *asyncLimit) Release() { s.n.Add(-1) }
