package client

import (
	"context"
	"fmt"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// writePath is how a transaction's writes reach the cluster and how it
// commits. It is the seam for the roadmap's commit optimisations, each of
// which changes when writes are sent and what the commit does:
//
//   - pipelining: write proposes the intent and returns before it is
//     durable; beforeRead waits for in-flight writes to the keys read
//     (read-your-writes); commit proves every write before the commit point.
//   - parallel commits: commit writes a STAGING record in parallel with the
//     proofs.
//   - 1PC: write buffers; commit sends the writes and the decision in one
//     proposal when they fall in one range.
//   - hierarchical validation: write buffers; commit hands read and write
//     sets to the validators, replacing the refresh.
//
// A writePath belongs to one transaction and is called by its methods only
// while the transaction is pending (write, beforeRead) or committing
// (commit). It may be called concurrently from the goroutines the user
// runs operations on.
type writePath interface {
	// write makes key (logical) hold value, or a tombstone if del, as an
	// intent of the transaction. The key is already in the write set and
	// the heartbeat record is written. Errors: *RetryableError (conflict),
	// routing errors.
	write(ctx context.Context, key, value []byte, del bool) error
	// beforeRead is called before a read of [start, end) (end nil: the key
	// start).
	beforeRead(ctx context.Context, start, end []byte) error
	// commit decides a transaction that wrote: it returns the commit
	// timestamp once the commit point succeeded; *RetryableError when the
	// transaction must abort (or was aborted); ErrAmbiguous when the outcome
	// could not be found out; any other error when it did not commit.
	commit(ctx context.Context) (uint64, error)
}

// syncWriter is the default protocol's write path: each write is a
// PutIntentRequest that returns once the intent is applied (durable on a
// Raft majority); commit is the status-table protocol of txn_commit.go.
type syncWriter struct {
	t *Txn
}

func newSyncWriter(t *Txn) writePath { return syncWriter{t: t} }

func (w syncWriter) write(ctx context.Context, key, value []byte, del bool) error {
	t := w.t
	req := &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PutIntent{PutIntent: &rpcpb.PutIntentRequest{
		Key: key, Value: value, Delete: del, Txn: t.meta(),
	}}}
	for round := 0; ; round++ {
		_, err := t.db.sender.sendOne(ctx, true, req)
		pb, ok := asKVError(err, rpcpb.ErrorCode_WRITE_CONFLICT)
		if !ok {
			return err
		}
		if len(pb.GetIntents()) > 0 {
			if round >= t.db.opts.IntentRoundsMax {
				return &RetryableError{Reason: ReasonIntentPending, Key: key, Ts: pb.GetIntents()[0].GetTxn().GetStartTs(),
					Msg: fmt.Sprintf("intents kept appearing after %d rounds (IntentRoundsMax)", round)}
			}
			if err := t.db.resolveForeign(ctx, pb.GetIntents(), t.waiter()); err != nil {
				return err
			}
			continue
		}
		return &RetryableError{Reason: ReasonWriteTooOld, Key: key, Ts: pb.GetExistingTs(), Msg: pb.GetMessage()}
	}
}

func (syncWriter) beforeRead(context.Context, []byte, []byte) error { return nil }

func (w syncWriter) commit(ctx context.Context) (uint64, error) { return w.t.commitStatusTable(ctx) }
