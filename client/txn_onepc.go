package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// One-phase commit (docs/design-notes.md, "One-phase commit (1PC)"): a
// transaction that has written nothing yet hands its writes to the commit
// (CommitWith); if they, and (serializable) everything it read, fall in one
// range, one CommitOnePC request commits them in one Raft proposal, with no
// intents, no status record and no heartbeat. Its commit point is that
// proposal; a lost reply is settled at the range (QueryOnePC), never in the
// status table.

// Write is one write handed to CommitWith: Key = Value, or a delete of Key.
type Write struct {
	Key    []byte
	Value  []byte
	Delete bool
}

// errOnePCIneligible: the writes (or the reads to check) do not fall in
// one range, as far as the range cache knows. Nothing was sent; the caller
// commits the ordinary way.
var errOnePCIneligible = errors.New("client: writes do not fit one range for a one-phase commit")

// CommitWith writes ws (in order; a later write of a key replaces an
// earlier one) and commits, like Put or Delete of each followed by Commit.
// If the transaction has written nothing before, one-phase commit is on
// (TxnOptions.OnePC, Options.OnePC, the cluster setting) and the writes,
// and for a serializable transaction every key and span it read, fall in
// one range, the writes and the commit are one request and one Raft
// proposal. Otherwise the writes (one per key) are sent all at once, as
// concurrent Puts and Deletes would be, and then the transaction commits.
// It returns what Commit returns; ErrAmbiguous only if the one-phase
// commit's reply was lost and the range could not tell whether it applied.
//
// In DB.Txn, fn may end with `return txn.CommitWith(ctx, ...)`: a
// transaction committed by CommitWith is not committed again.
func (t *Txn) CommitWith(ctx context.Context, ws ...Write) error {
	var logical []Write
	idx := map[string]int{}
	for _, w := range ws {
		if err := checkKey(w.Key); err != nil {
			return err
		}
		if w.Delete {
			w.Value = nil
		} else if err := checkValue(w.Value); err != nil {
			return err
		}
		lw := Write{Key: keys.UserKey(w.Key), Value: w.Value, Delete: w.Delete}
		if i, ok := idx[string(lw.Key)]; ok {
			logical[i] = lw
			continue
		}
		idx[string(lw.Key)] = len(logical)
		logical = append(logical, lw)
	}
	if len(logical) > 0 && t.onePC && t.hier == nil {
		if done, err := t.tryOnePC(ctx, logical); done {
			return err
		}
	}
	if err := t.writeConcurrently(ctx, logical); err != nil {
		return err
	}
	return t.Commit(ctx)
}

// writeConcurrently writes ws (distinct keys) as Put or Delete of each
// would, all at once: a transaction's operations may run on several
// goroutines, and writes of distinct keys do not depend on each other, so
// handing them to the commit costs one round of writes (pipelined or not),
// not one per write. It returns when every write has returned, with the
// first error: a retryable one before any other, since it poisons the
// transaction whichever write met it.
func (t *Txn) writeConcurrently(ctx context.Context, ws []Write) error {
	if len(ws) == 1 || t.hier != nil {
		// The hierarchy's writes are buffered in the client: nothing to
		// overlap.
		for _, w := range ws {
			if err := t.writeLogical(ctx, w.Key, w.Value, w.Delete); err != nil {
				return err
			}
		}
		return nil
	}
	errs := eachConcurrently(len(ws), func(i int) error { return t.writeLogical(ctx, ws[i].Key, ws[i].Value, ws[i].Delete) })
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if errors.Is(err, ErrRetryable) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// tryOnePC commits with one CommitOnePC request if the transaction may.
// done is false when it may not (or the writes do not fit one range) and
// nothing was sent: the caller commits the ordinary way.
func (t *Txn) tryOnePC(ctx context.Context, ws []Write) (done bool, err error) {
	t.opMu.Lock()
	t.mu.Lock()
	eligible := t.mu.state == txnPending && t.mu.err == nil && len(t.mu.writeKeys) == 0 && !t.hb.written()
	if eligible {
		t.mu.state = txnCommitting
		t.mu.onePCSent = true
	}
	t.mu.Unlock()
	t.opMu.Unlock()
	if !eligible {
		return false, nil
	}
	resp, err := t.send(ctx, &txnReq{op: opCommitOnePC, writes: ws})
	switch {
	case err == nil:
		t.db.stats.onePCCommits.add(1)
		t.finish(ctx, decision{commitTs: resp.ts})
		return true, nil
	case errors.Is(err, errOnePCIneligible):
		t.mu.Lock()
		t.mu.state = txnPending
		t.mu.onePCSent = false
		t.mu.Unlock()
		return false, nil
	case errors.Is(err, ErrAmbiguous):
		t.hb.stop()
		t.setState(txnUnknown)
		t.db.stats.ambiguous.add(1)
		return true, err
	default:
		// Certainly not applied (the committer settled any lost reply):
		// no intent, no record, nothing to abort.
		t.finish(ctx, decision{})
		return true, publicError(err)
	}
}

// onePC sends the CommitOnePC request to the range of the first write and
// returns the commit timestamp. Foreign intents in the way are resolved
// and the request sent again (at most Options.IntentRoundsMax rounds).
// errOnePCIneligible if the range cache says the writes or spans do not
// fit one range. Like a non-transactional Put, an attempt that may have
// applied is never resent (the server would answer a resend from the 1PC
// record, but only while the record still holds it): it ends with
// ErrAmbiguous, which the committer settles with QueryOnePC.
func (w *txnWire) onePC(ctx context.Context, ws []Write, spans []*rpcpb.Span) (uint64, error) {
	t := w.t
	db := t.db
	req := &rpcpb.CommitOnePCRequest{TxnStart: t.startTs, RefreshSpans: spans}
	for _, x := range ws {
		req.Writes = append(req.Writes, &rpcpb.OnePCWrite{Key: x.Key, Value: x.Value, Delete: x.Delete})
	}
	ru := &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_CommitOnePc{CommitOnePc: req}}
	for round := 0; ; round++ {
		var commitTs uint64
		// write=false: this call reports ambiguity itself (stopError).
		_, err := db.sender.route(ctx, ws[0].Key, false, func(ctx context.Context, kv rpcpb.KVClient, d *rpcpb.RangeDescriptor) (*rpcpb.Error, error) {
			if !fitsRange(d, ws, spans) {
				return nil, &stopError{errOnePCIneligible}
			}
			resp, err := kv.Batch(ctx, &rpcpb.BatchRequest{RangeId: d.GetRangeId(), Requests: []*rpcpb.RequestUnion{ru}})
			if err != nil {
				if neverSent(err) || refused(err) {
					return nil, err
				}
				return nil, &stopError{fmt.Errorf("%w: one-phase commit of transaction %d may have been applied: %w", ErrAmbiguous, t.startTs, err)}
			}
			pe := resp.GetError()
			switch {
			case pe.GetCode() == rpcpb.ErrorCode_AMBIGUOUS:
				return nil, &stopError{fmt.Errorf("%w: one-phase commit of transaction %d may have been applied: %s", ErrAmbiguous, t.startTs, pe.GetMessage())}
			case pe.GetCode() != rpcpb.ErrorCode_OK:
				return pe, nil
			case len(resp.GetResponses()) != 1 || resp.GetResponses()[0].GetCommitOnePc().GetCommitTs() <= t.startTs:
				return nil, &stopError{fmt.Errorf("%w: one-phase commit answered with %v", ErrInternal, resp.GetResponses())}
			}
			commitTs = resp.GetResponses()[0].GetCommitOnePc().GetCommitTs()
			return nil, nil
		})
		if err == nil {
			return commitTs, nil
		}
		var ke *kvError
		if !errors.As(err, &ke) {
			return 0, err
		}
		pb := ke.pb
		if len(pb.GetIntents()) > 0 {
			if round >= db.opts.IntentRoundsMax {
				return 0, &RetryableError{Reason: ReasonIntentPending, Key: ws[0].Key, Ts: pb.GetIntents()[0].GetTxn().GetStartTs(),
					Msg: fmt.Sprintf("intents kept appearing after %d rounds (IntentRoundsMax)", round)}
			}
			if err := db.resolveForeign(ctx, pb.GetIntents(), t.waiter()); err != nil {
				return 0, err
			}
			continue
		}
		if pb.GetCode() == rpcpb.ErrorCode_READ_CONFLICT {
			return 0, &RetryableError{Reason: ReasonReadConflict, Ts: pb.GetExistingTs(), Msg: pb.GetMessage()}
		}
		return 0, &RetryableError{Reason: ReasonWriteTooOld, Ts: pb.GetExistingTs(), Msg: pb.GetMessage()}
	}
}

// fitsRange reports whether every write and span lies in d.
func fitsRange(d *rpcpb.RangeDescriptor, ws []Write, spans []*rpcpb.Span) bool {
	for _, w := range ws {
		if !keys.Contains(d.GetStartKey(), d.GetEndKey(), w.Key) {
			return false
		}
	}
	for _, sp := range spans {
		if !keys.Contains(d.GetStartKey(), d.GetEndKey(), sp.GetStart()) {
			return false
		}
		if end := sp.GetEnd(); len(end) > 0 && string(end) > string(d.GetEndKey()) {
			return false
		}
	}
	return true
}

// queryOnePC settles a lost CommitOnePC reply at its first key (a resend
// of QueryOnePC is harmless: it reads or refuses the same).
func (w *txnWire) queryOnePC(ctx context.Context, key []byte) (*txnResp, error) {
	resp, err := w.t.db.sender.sendOne(ctx, true, &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_QueryOnePc{
		QueryOnePc: &rpcpb.QueryOnePCRequest{Key: key, TxnStart: w.t.startTs}}})
	if err != nil {
		return nil, err
	}
	q := resp.GetQueryOnePc()
	if q == nil {
		return nil, fmt.Errorf("%w: query one-pc answered with %T", ErrInternal, resp.GetValue())
	}
	if q.GetCommitted() {
		return &txnResp{found: true, ts: q.GetCommitTs()}, nil
	}
	return &txnResp{prevented: q.GetPrevented()}, nil
}
