package testcluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/testcluster/check"
)

// History records what a test's clients did, for the checkers in package
// check. It follows the checkers' contract (check's package documentation):
// one monotonic clock for every client (Now is time.Since of one start
// instant, so wall-clock jumps cannot reorder operations), every started
// operation recorded, outcomes classified by KVWriteOutcome and TxnOutcome.
// It is safe for concurrent use.
type History struct {
	start time.Time
	mu    struct {
		sync.Mutex
		kv     []check.KVOp
		txns   []check.TxnRecord
		nextID int
	}
}

// NewHistory returns an empty history whose clock starts now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the history's clock, in nanoseconds since NewHistory. Take Call
// right before sending a request and Return right after its answer.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// AddKV records one single-key operation.
func (h *History) AddKV(op check.KVOp) {
	h.mu.Lock()
	h.mu.kv = append(h.mu.kv, op)
	h.mu.Unlock()
}

// KV returns a copy of the single-key operations recorded so far.
func (h *History) KV() []check.KVOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]check.KVOp(nil), h.mu.kv...)
}

// NextTxnID returns a fresh transaction ID for a check.TxnRecord.
func (h *History) NextTxnID() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.nextID++
	return h.mu.nextID
}

// AddTxn records one transaction attempt.
func (h *History) AddTxn(t check.TxnRecord) {
	h.mu.Lock()
	h.mu.txns = append(h.mu.txns, t)
	h.mu.Unlock()
}

// Txns returns a copy of the transactions recorded so far.
func (h *History) Txns() []check.TxnRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]check.TxnRecord(nil), h.mu.txns...)
}

// KVWriteOutcome classifies the error of a single-key Put or Delete. Only
// success and ErrInvalidArgument (refused before anything was sent, or by
// the server's validation before evaluation) are certain; every other error
// may hide an applied write, so it is Unknown. ErrUnavailable promises that
// nothing was written, but a test that trusted the promise could only turn
// a broken promise into a confusing linearizability failure, so the
// recorder stays conservative: Unknown costs checking power, never
// soundness.
func KVWriteOutcome(err error) check.Outcome {
	switch {
	case err == nil:
		return check.OK
	case errors.Is(err, client.ErrInvalidArgument):
		return check.Failed
	default:
		return check.Unknown
	}
}

// TxnOutcome classifies what DB.Txn (or Txn.Commit) returned for its last
// attempt, following the client's documented contract (client package
// documentation, item 4, and the error classes): nil is committed;
// ErrRetryable, ErrUnavailable and ErrInvalidArgument mean it did not
// commit; ErrAmbiguous, a context error and anything else leave the outcome
// unknown. Trusting ErrUnavailable is deliberate: it is part of the
// contract under test, and if the client broke it, a trusted read of a
// write of a "failed" transaction shows up as G1a (aborted read).
//
// Earlier attempts of one DB.Txn call all aborted: DB.Txn reruns its
// closure only after an ErrRetryable.
func TxnOutcome(err error) (committed, ambiguous bool) {
	switch {
	case err == nil:
		return true, false
	case errors.Is(err, client.ErrRetryable):
		// Also "abandoned after n attempts" (it wraps the context error
		// and the last attempt's retryable error): that attempt aborted.
		return false, false
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false, true
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrInvalidArgument):
		return false, false
	default:
		return false, true
	}
}
