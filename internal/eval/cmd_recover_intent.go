package eval

import (
	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// RecoverIntent is the recovery of a STAGING transaction at one of its
// in-flight writes (docs/design-notes.md, "Parallel commits"). Under the
// key's write latch (so after the write, if it is still in flight): the
// transaction's intent with the staged value is there -> found; otherwise
// its start is refused at the key, so that the PutIntent can never land
// (PutIntent checks the key record) -> not found, and the transaction can
// never become implicitly committed.
func init() {
	register(rpcpb.MethodRecoverIntent, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			add(pointSpan(ru.GetRecoverIntent().GetKey(), concurrency.Write))
		},
		EvalWrite: evalRecoverIntent,
	})
}

func evalRecoverIntent(c Context, rw storage.ReadWriter, ru *rpcpb.RequestUnion, _ *Effects) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	q := ru.GetRecoverIntent()
	if !ContainsKey(c.Desc, q.GetKey()) {
		return nil, Mismatch(c.Desc, q.GetKey())
	}
	if q.GetTxnStart() == 0 {
		return nil, rpcpb.NewError(rpcpb.ErrorCode_INVALID_ARGUMENT, "RecoverIntent without a transaction start timestamp")
	}
	iv, found, err := mvcc.GetIntent(rw, q.GetKey())
	if err != nil {
		return nil, Error(err)
	}
	found = found && iv.Txn.StartTs == q.GetTxnStart() && rpcpb.IntentValueHash(iv.Value, iv.IsDelete) == q.GetValueHash()
	if !found {
		rec, err := loadKeyRecord(rw, q.GetKey())
		if err != nil {
			return nil, Error(err)
		}
		if !rec.refuses(q.GetTxnStart()) {
			if err := rec.refuse(q.GetTxnStart()); err != nil {
				return nil, Error(err)
			}
			if err := storeKeyRecord(rw, q.GetKey(), rec); err != nil {
				return nil, Error(err)
			}
		}
	}
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_RecoverIntent{RecoverIntent: &rpcpb.RecoverIntentResponse{Found: found}}}, nil
}
