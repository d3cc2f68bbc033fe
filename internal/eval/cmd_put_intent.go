package eval

import (
	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// PutIntent writes a transaction's provisional value (or tombstone) at a
// key. A committed version newer than the transaction's start, or another
// transaction's intent, is a conflict.
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
	if err := mvcc.PutIntent(rw, p.Key, p.Value, p.Delete, txn); err != nil {
		return nil, Error(err)
	}
	fx.Locked = append(fx.Locked, Lock{Key: p.Key, Txn: txn.StartTs})
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_PutIntent{PutIntent: &rpcpb.PutIntentResponse{}}}, nil
}
