package client

import (
	"context"
	"fmt"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// Recovery of STAGING transactions (docs/design-notes.md, "Parallel
// commits and the STAGING record"). A transaction that committed in
// parallel is implicitly committed once its STAGING record (commit_ts and
// its in-flight writes W) won its staging key and every write of W is in
// place; its coordinator then records COMMITTED. A reader that finds such
// a transaction with no status and an expired heartbeat, or the
// coordinator itself after a parallel commit that failed, settles it:
//
//  1. RecoverIntent for every write of W, at the key's leaseholder under
//     its write latch: found, or refused there for good (it can never land
//     afterwards);
//  2. all found: put-unless-exists(COMMITTED at the record's commit_ts);
//     any refused: put-unless-exists(ABORTED). The value already there, if
//     any, decides instead.
//
// Step 1 never turns an implicit commit into an abort: a write of an
// implicitly committed transaction is in place and stays there until the
// transaction is decided (only resolution removes an intent, and the
// coordinator resolves only after COMMITTED is recorded). And once a write
// is refused, the transaction can never become implicitly committed.

// recoverStaging settles the transaction whose STAGING record is st by
// sending l the two steps: opRecoverIntents (proofs: the staged writes;
// the answer's proven says which are in place, the others now refused),
// then opPutStatus. The DB's l is dbRecovery; step tests script it
// (testdata/layers/recovery). An error means nothing was decided by this
// call (a later one may).
func recoverStaging(ctx context.Context, l txnLayer, st txnstatus.Staging) (decision, error) {
	if st.Fence {
		panic("client: recoverStaging of a fence")
	}
	ws := make([]inFlightWrite, len(st.Writes))
	for i, w := range st.Writes {
		ws[i] = inFlightWrite{key: w.Key, hash: w.ValueHash}
	}
	rr, err := l.send(ctx, &txnReq{op: opRecoverIntents, proofs: ws})
	if err != nil {
		return decision{}, err
	}
	if len(rr.proven) != len(ws) {
		return decision{}, fmt.Errorf("%w: %d answers to %d recoveries", ErrInternal, len(rr.proven), len(ws))
	}
	commitTs := st.CommitTs
	for _, f := range rr.proven {
		if !f {
			commitTs = txnstatus.Aborted
			break
		}
	}
	pr, err := l.send(ctx, &txnReq{op: opPutStatus, ts: commitTs})
	if err != nil {
		return decision{}, err
	}
	if pr.won {
		return decision{commitTs: commitTs}, nil
	}
	return pr.d, nil
}

// dbRecovery sends recovery's requests for the transaction startTs.
type dbRecovery struct {
	db      *DB
	startTs uint64
}

func (r dbRecovery) send(ctx context.Context, q *txnReq) (*txnResp, error) {
	db := r.db
	switch q.op {
	case opRecoverIntents:
		out := &txnResp{proven: make([]bool, len(q.proofs))}
		if len(q.proofs) == 0 {
			return out, nil
		}
		reqs := make([]*rpcpb.RequestUnion, len(q.proofs))
		for i, w := range q.proofs {
			reqs[i] = &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_RecoverIntent{RecoverIntent: &rpcpb.RecoverIntentRequest{
				Key: w.key, TxnStart: r.startTs, ValueHash: w.hash}}}
		}
		// A resend is harmless: it finds the intent, or the refusal.
		resps, err := db.sender.sendPoints(ctx, true, reqs)
		if err != nil {
			return nil, err
		}
		for i, resp := range resps {
			ri := resp.GetRecoverIntent()
			if ri == nil {
				return nil, fmt.Errorf("%w: recover intent answered with %T", ErrInternal, resp.GetValue())
			}
			out.proven[i] = ri.GetFound()
		}
		return out, nil
	case opPutStatus:
		v, err := db.statusValue(r.startTs, q.ts)
		if err != nil {
			return nil, err
		}
		ok, existing, err := db.putUnlessExists(ctx, db.statusKey(r.startTs), v)
		if err != nil {
			return nil, err
		}
		if ok {
			return &txnResp{won: true}, nil
		}
		c, _, err := db.decodeStatus(r.startTs, existing)
		if err != nil {
			return nil, err
		}
		return &txnResp{d: decision{commitTs: c}}, nil
	}
	panic(fmt.Sprintf("client: recovery sent %v", q.op))
}

// stagingKey is the logical key of the staging record of startTs.
func (db *DB) stagingKey(startTs uint64) []byte {
	return keys.StatusKey(txnstatus.StagingKey(db.encOf(startTs), startTs))
}

// abortOrRecover decides a transaction with no status whose heartbeat has
// expired, or a younger live one a waiter wounds (waiter.wounds); an abort
// is counted in aborts. It first fences its staging key (put-unless-exists of FENCE),
// so that no STAGING record can appear once we write ABORTED; if a STAGING
// record is already there, the transaction may be implicitly committed and
// is recovered instead of aborted.
func (db *DB) abortOrRecover(ctx context.Context, startTs uint64, aborts *countingInt) (decision, error) {
	ok, existing, err := db.putUnlessExists(ctx, db.stagingKey(startTs), txnstatus.FenceValue())
	if err != nil {
		return decision{}, err
	}
	if !ok {
		st, err := txnstatus.DecodeStaging(startTs, existing)
		if err != nil {
			return decision{}, fmt.Errorf("%w: %w: staging record of %d: %w", ErrInternal, errBadStatus, startTs, err)
		}
		if !st.Fence {
			d, err := recoverStaging(ctx, dbRecovery{db: db, startTs: startTs}, st)
			if err != nil {
				return decision{}, err
			}
			db.stats.recovered.add(1)
			db.statuses.put(startTs, d.commitTs)
			// Its coordinator is gone: resolve every staged write, not
			// only those this reader met (resolving as aborted also drops
			// the refusals recovery left). Best effort: readers resolve
			// what is left when they meet it.
			ks := make([][]byte, len(st.Writes))
			for i, w := range st.Writes {
				ks[i] = w.Key
			}
			if err := db.resolveKeys(ctx, startTs, d.commitTs, ks); err != nil {
				db.opts.Logger.Debug("canopy client: resolving a recovered transaction's writes failed", "start_ts", startTs, "err", err)
			}
			return d, nil
		}
	}
	d, err := db.abortTxn(ctx, startTs)
	if err == nil && d.aborted() {
		aborts.add(1)
	}
	return d, err
}

// TxnStatus is a transaction's record in the status table, as
// DB.TxnStatus reads it.
type TxnStatus struct {
	// Decided: the status key holds a decision, Aborted or CommitTs.
	Decided  bool
	Aborted  bool
	CommitTs uint64
	// Staged: its staging key holds a STAGING record (at StagedTs);
	// Fenced: a FENCE (a reader aborted it, or was about to).
	Staged, Fenced bool
	StagedTs       uint64
}

// TxnStatus reads the status and staging records of the transaction that
// started at startTs, without deciding anything (for tools and tests).
func (db *DB) TxnStatus(ctx context.Context, startTs uint64) (TxnStatus, error) {
	if err := db.ensureSchedule(ctx, false, startTs); err != nil {
		return TxnStatus{}, err
	}
	resps, err := db.sender.sendPoints(ctx, false, []*rpcpb.RequestUnion{
		{Value: &rpcpb.RequestUnion_PlainGet{PlainGet: &rpcpb.PlainGetRequest{Key: db.statusKey(startTs)}}},
		{Value: &rpcpb.RequestUnion_PlainGet{PlainGet: &rpcpb.PlainGetRequest{Key: db.stagingKey(startTs)}}},
	})
	if err != nil {
		return TxnStatus{}, publicError(err)
	}
	var s TxnStatus
	if g := resps[0].GetPlainGet(); g.GetFound() {
		c, aborted, err := db.decodeStatus(startTs, g.GetValue())
		if err != nil {
			return TxnStatus{}, err
		}
		s.Decided, s.Aborted, s.CommitTs = true, aborted, c
	}
	if g := resps[1].GetPlainGet(); g.GetFound() {
		st, err := txnstatus.DecodeStaging(startTs, g.GetValue())
		if err != nil {
			return TxnStatus{}, fmt.Errorf("%w: %w: staging record of %d: %w", ErrInternal, errBadStatus, startTs, err)
		}
		s.Fenced, s.Staged, s.StagedTs = st.Fence, !st.Fence, st.CommitTs
	}
	return s, nil
}
