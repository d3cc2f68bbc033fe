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
// refuses (keyrecord.go).
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
	// A recovery that found this write missing refused it here for good
	// (cmd_recover_intent.go): it must never land.
	rec, err := loadKeyRecord(rw, p.Key)
	if err != nil {
		return nil, Error(err)
	}
	if rec.refuses(txn.StartTs) {
		return nil, rpcpb.NewError(rpcpb.ErrorCode_WRITE_CONFLICT, "write of transaction %d at %q was refused (a recovery found it missing)", txn.StartTs, p.Key)
	}
	if err := mvcc.PutIntent(rw, p.Key, p.Value, p.Delete, txn); err != nil {
		return nil, Error(err)
	}
	fx.Locked = append(fx.Locked, Lock{Key: p.Key, Txn: txn.StartTs})
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_PutIntent{PutIntent: &rpcpb.PutIntentResponse{}}}, nil
}
