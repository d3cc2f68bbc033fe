package eval

import (
	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// PutIntent writes a transaction's provisional value (or tombstone) at a
// key. A committed version newer than the transaction's start, or another
// transaction's intent, is a conflict; so is a write the key record
// refuses (keyrecord.go), and one of a transaction that started below the
// GC threshold (TS_BELOW_GC_THRESHOLD).
func init() {
	register(rpcpb.MethodPutIntent, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			add(pointSpan(ru.GetPutIntent().GetKey(), concurrency.Write))
		},
		EvalWrite: evalPutIntent,
	})
}

func evalPutIntent(c Context, rw storage.ReadWriter, ru *rpcpb.RequestUnion, fx *Effects) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	p := ru.GetPutIntent()
	if !ContainsKey(c.Desc, p.Key) {
		return nil, Mismatch(c.Desc, p.Key)
	}
	txn := mvcc.TxnMeta{StartTs: p.Txn.GetStartTs(), HeartbeatKey: p.Txn.GetHeartbeatKey()}
	// A transaction that started below the GC threshold may have been
	// refused here by a recovery whose refusal GC has since dropped
	// (keyrecord.go): such a write is refused as a whole. Its reads and
	// refreshes are refused there anyway; the client retries with a new
	// start_ts.
	if txn.StartTs < c.GCThreshold {
		return nil, belowGC(c, txn.StartTs)
	}
	// A recovery that found this write missing refused it here for good
	// (cmd_recover_intent.go): it must never land.
	rec, st, err := loadKeyRecordState(rw, p.Key)
	if err != nil {
		return nil, Error(err)
	}
	if rec.refuses(txn.StartTs) {
		return nil, rpcpb.NewError(rpcpb.ErrorCode_WRITE_CONFLICT, "write of transaction %d at %q was refused (a recovery found it missing)", txn.StartTs, p.Key)
	}
	if err := mvcc.PutIntentLoaded(rw, st, p.Key, p.Value, p.Delete, txn); err != nil {
		return nil, Error(err)
	}
	fx.Locked = append(fx.Locked, Lock{Key: p.Key, Txn: txn.StartTs})
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_PutIntent{PutIntent: &rpcpb.PutIntentResponse{}}}, nil
}
