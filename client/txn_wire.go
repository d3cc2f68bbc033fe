package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// txnWire is the bottom layer of the coordinator (txn_layers.go): it turns
// each request into RPCs through the DB's sender and the server's answers
// into responses and typed errors. It is where the transaction meets other
// transactions' intents: reads, writes and the refresh resolve those they
// meet by their writers' status (resolveForeign, waiting for a live writer
// within the wait budget) and try again, at most Options.IntentRoundsMax
// times. It keeps no state of its own.
//
//   - opGet, opScan: reads at start_ts that see the transaction's own
//     intents.
//   - opWrite: one PutIntentRequest, with async consensus if the
//     pipeliner asked for it (answered once the leaseholder has evaluated
//     and proposed it). A newer committed version is a *RetryableError
//     (ReasonWriteTooOld).
//   - opProve: one QueryIntentRequest per in-flight write, batched per
//     range, the batches in parallel. Each waits at the leaseholder for the
//     write in flight on its key (its read latch) and says whether the
//     transaction's intent with the written value is there.
//   - opTimestamp: the oracle.
//   - opRefresh: RefreshRequests, one per range, in parallel; a change is a
//     *RetryableError (ReasonReadConflict).
//   - opPutStatus, opGetStatus: the status record (status.go). A record
//     that does not decode is ErrInternal with errBadStatus.
//   - opOnePC, opQueryOnePC: the one-phase commit and the settling of its
//     lost reply (txn_onepc.go).
//   - opGet with lock, opPrepare, opResolveKeys: 2pc-locking's locking
//     read, first phase (one Prepare per range, in parallel) and second
//     phase (txn_twopc.go).
//   - opPutStaging: put-unless-exists of the STAGING record; won, or
//     fenced by a reader. opRecover: recovery of our own STAGING record
//     (recovery.go).
//
// opCommit and opAbort never get here: the committer answers them.
type txnWire struct {
	t *Txn
}

func (w *txnWire) send(ctx context.Context, r *txnReq) (*txnResp, error) {
	t := w.t
	db := t.db
	switch r.op {
	case opGet:
		if r.lock {
			return w.lockingGet(ctx, r.key) // txn_twopc.go
		}
		g, err := db.get(ctx, r.key, t.startTs, t.startTs, t.waiter())
		if err != nil {
			return nil, err
		}
		return &txnResp{value: g.GetValue(), found: g.GetFound()}, nil
	case opScan:
		kvs, err := db.sender.scan(ctx, r.key, r.end, t.startTs, t.startTs, r.limit, db.opts.ScanKeysMax, db.opts.IntentRoundsMax,
			func(ctx context.Context, intents []*rpcpb.Intent) error {
				return db.resolveForeign(ctx, intents, t.waiter())
			})
		if err != nil {
			return nil, err
		}
		return &txnResp{kvs: kvs}, nil
	case opWrite:
		return &txnResp{}, w.write(ctx, r)
	case opPrepare:
		return &txnResp{}, w.prepare(ctx, r.writes, r.keys) // txn_twopc.go
	case opResolveKeys:
		return &txnResp{}, db.resolveKeys(ctx, t.startTs, r.ts, r.keys)
	case opProve:
		return w.prove(ctx, r.proofs)
	case opTimestamp:
		ts, err := db.oracle.timestamp(ctx)
		if err != nil {
			return nil, err
		}
		return &txnResp{ts: ts}, nil
	case opRefresh:
		return &txnResp{}, w.refresh(ctx, r.spans, r.ts)
	case opPutStatus:
		v, err := db.statusValue(t.startTs, r.ts)
		if err != nil {
			return nil, err
		}
		ok, existing, err := db.putUnlessExists(ctx, db.statusKey(t.startTs), v)
		if err != nil {
			return nil, err
		}
		if ok {
			return &txnResp{won: true}, nil
		}
		c, _, err := db.decodeStatus(t.startTs, existing)
		if err != nil {
			return nil, err
		}
		return &txnResp{d: decision{commitTs: c}}, nil
	case opOnePC:
		ts, err := w.onePC(ctx, r.writes, r.spans)
		if err != nil {
			return nil, err
		}
		return &txnResp{ts: ts}, nil
	case opQueryOnePC:
		return w.queryOnePC(ctx, r.key)
	case opPutStaging:
		return w.putStaging(ctx, r.ts, r.proofs)
	case opRecover:
		d, err := recoverStaging(ctx, dbRecovery{db: db, startTs: t.startTs}, txnstatus.Staging{CommitTs: r.ts, Writes: stagedWrites(r.proofs)})
		if err != nil {
			return nil, err
		}
		db.statuses.put(t.startTs, d.commitTs)
		return &txnResp{d: d}, nil
	case opGetStatus:
		// The ambiguous-commit lookup: the batched lookup path (one cell),
		// which caches a decision and never a missing record.
		got, err := db.lookupStatuses(ctx, []uint64{t.startTs})
		if err != nil {
			return nil, err
		}
		c, found := got[t.startTs]
		if !found {
			return &txnResp{}, nil
		}
		return &txnResp{found: true, d: decision{commitTs: c}}, nil
	}
	panic(fmt.Sprintf("client: %v reached the bottom of the transaction's layers", r.op))
}

// write sends one PutIntentRequest, resolving the intents of others it
// meets.
func (w *txnWire) write(ctx context.Context, r *txnReq) error {
	t := w.t
	req := &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PutIntent{PutIntent: &rpcpb.PutIntentRequest{
		Key: r.key, Value: r.value, Delete: r.del, Txn: t.meta(),
	}}}
	for round := 0; ; round++ {
		_, err := t.db.sender.sendPointsWith(ctx, true, r.async, []*rpcpb.RequestUnion{req})
		pb, ok := asKVError(err, rpcpb.ErrorCode_WRITE_CONFLICT)
		if !ok {
			return err
		}
		if len(pb.GetIntents()) > 0 {
			if round >= t.db.opts.IntentRoundsMax {
				return &RetryableError{Reason: ReasonIntentPending, Key: r.key, Ts: pb.GetIntents()[0].GetTxn().GetStartTs(),
					Msg: fmt.Sprintf("intents kept appearing after %d rounds (IntentRoundsMax)", round)}
			}
			if err := t.db.resolveForeign(ctx, pb.GetIntents(), t.waiter()); err != nil {
				return err
			}
			continue
		}
		return &RetryableError{Reason: ReasonWriteTooOld, Key: r.key, Ts: pb.GetExistingTs(), Msg: pb.GetMessage()}
	}
}

// prove asks whether each write is in place.
func (w *txnWire) prove(ctx context.Context, ws []inFlightWrite) (*txnResp, error) {
	t := w.t
	reqs := make([]*rpcpb.RequestUnion, len(ws))
	for i, p := range ws {
		reqs[i] = &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_QueryIntent{QueryIntent: &rpcpb.QueryIntentRequest{
			Key: p.key, TxnStart: t.startTs, ValueHash: p.hash}}}
	}
	resps, err := t.db.sender.sendPoints(ctx, false, reqs)
	if err != nil {
		return nil, err
	}
	out := &txnResp{proven: make([]bool, len(ws))}
	for i, r := range resps {
		q := r.GetQueryIntent()
		if q == nil {
			return nil, fmt.Errorf("%w: query intent answered with %T", ErrInternal, r.GetValue())
		}
		out.proven[i] = q.GetFound()
	}
	return out, nil
}

// refresh runs the serializable commit check over spans. Intents the
// servers report are resolved (waiting for live transactions, bounded)
// and the check repeated.
func (w *txnWire) refresh(ctx context.Context, spans []*rpcpb.Span, commitTs uint64) error {
	t := w.t
	db := t.db
	for round := 0; ; round++ {
		err := db.sender.refresh(ctx, spans, t.startTs, commitTs, t.startTs)
		if err == nil {
			return nil
		}
		var ke *kvError
		if !errors.As(err, &ke) {
			return err
		}
		if len(ke.pb.GetIntents()) > 0 && round < db.opts.IntentRoundsMax {
			if err := db.resolveForeign(ctx, ke.pb.GetIntents(), t.waiter()); err != nil {
				return err
			}
			continue
		}
		return &RetryableError{Reason: ReasonReadConflict, Ts: ke.pb.GetExistingTs(), Msg: ke.pb.GetMessage()}
	}
}

// stagedWrites converts in-flight writes to a STAGING record's writes.
func stagedWrites(ws []inFlightWrite) []txnstatus.StagedWrite {
	out := make([]txnstatus.StagedWrite, len(ws))
	for i, w := range ws {
		out[i] = txnstatus.StagedWrite{Key: w.key, ValueHash: w.hash}
	}
	return out
}

// putStaging writes our STAGING record with put-unless-exists. The sender
// resends it after an ambiguous attempt; the resend finds our own value,
// which counts as won (putUnlessExists), or, if a reader decided the
// transaction meanwhile and status-table GC deleted the record, a FENCE
// (the committer's settleFenced).
func (w *txnWire) putStaging(ctx context.Context, commitTs uint64, ws []inFlightWrite) (*txnResp, error) {
	t := w.t
	db := t.db
	v, err := txnstatus.EncodeStaging(t.startTs, commitTs, stagedWrites(ws))
	if err != nil {
		return nil, fmt.Errorf("%w: %w: staging record of %d: %w", ErrInternal, errBadStatus, t.startTs, err)
	}
	ok, existing, err := db.putUnlessExists(ctx, db.stagingKey(t.startTs), v)
	if err != nil {
		return nil, err
	}
	if ok {
		return &txnResp{won: true}, nil
	}
	st, err := txnstatus.DecodeStaging(t.startTs, existing)
	if err != nil {
		return nil, fmt.Errorf("%w: %w: staging record of %d: %w", ErrInternal, errBadStatus, t.startTs, err)
	}
	if !st.Fence {
		// Only this transaction writes STAGING, once.
		return nil, fmt.Errorf("%w: staging record of %d holds another STAGING record", ErrInternal, t.startTs)
	}
	return &txnResp{fenced: true}, nil
}
