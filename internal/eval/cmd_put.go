package eval

import (
	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// Put writes a committed version outside any transaction, at the batch's
// write timestamp (Context.WriteTs). An intent at the key, or a version at
// or above the timestamp, is a conflict; so is, on a 2pc-locking cluster
// (Context.SharedLocks), a transaction's replicated shared lock.
func init() {
	register(rpcpb.MethodPut, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			add(pointSpan(ru.GetPut().GetKey(), concurrency.Write))
		},
		EvalWrite: evalPut,
	})
}

func evalPut(c Context, rw storage.ReadWriter, ru *rpcpb.RequestUnion, _ *Effects) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	p := ru.GetPut()
	if !ContainsKey(c.Desc, p.Key) {
		return nil, Mismatch(c.Desc, p.Key)
	}
	if c.WriteTs == 0 {
		return nil, rpcpb.NewError(rpcpb.ErrorCode_INTERNAL, "put without a write timestamp")
	}
	if c.SharedLocks {
		rec, err := loadKeyRecord(rw, p.Key)
		if err != nil {
			return nil, Error(err)
		}
		if other := rec.sharedBy(0); other != 0 {
			e := lockConflict(p.Key, other, true)
			e.Code = rpcpb.ErrorCode_INTENT_FOUND
			return nil, e
		}
	}
	if err := mvcc.PutCommitted(rw, p.Key, p.Value, p.Delete, c.WriteTs); err != nil {
		return nil, Error(err)
	}
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_Put{Put: &rpcpb.PutResponse{Ts: c.WriteTs}}}, nil
}
