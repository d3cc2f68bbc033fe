package eval

import (
	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// ResolveIntent turns a transaction's intent into a committed version
// (commit_ts != 0) or removes it (commit_ts == 0, aborted). Idempotent: an
// intent that is gone, or belongs to another transaction, is left alone.
// Resolving as aborted also drops the transaction's refusal at the key;
// resolving either way drops its replicated shared lock there, and the
// lock table then releases whatever lock it holds at the key.
func init() {
	register(rpcpb.MethodResolveIntent, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			add(pointSpan(ru.GetResolveIntent().GetKey(), concurrency.Write))
		},
		EvalWrite: evalResolveIntent,
	})
}

func evalResolveIntent(c Context, rw storage.ReadWriter, ru *rpcpb.RequestUnion, fx *Effects) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	p := ru.GetResolveIntent()
	if !ContainsKey(c.Desc, p.Key) {
		return nil, Mismatch(c.Desc, p.Key)
	}
	rec, st, err := loadKeyRecordState(rw, p.Key)
	if err != nil {
		return nil, Error(err)
	}
	if _, err := mvcc.ResolveIntentLoaded(rw, st, p.Key, p.TxnStart, p.CommitTs); err != nil {
		return nil, Error(err)
	}
	// The transaction's shared lock here (2pc-locking) ends with its
	// decision, whatever it is.
	changed := rec.unshare(p.TxnStart)
	// An aborted transaction's refusal here is no longer needed: a late
	// intent is resolved by the first reader, who finds it aborted.
	if p.CommitTs == 0 && rec.unrefuse(p.TxnStart) {
		changed = true
	}
	if changed {
		if err := storeKeyRecord(rw, p.Key, rec); err != nil {
			return nil, Error(err)
		}
	}
	fx.Unlocked = append(fx.Unlocked, Lock{Key: p.Key, Txn: p.TxnStart})
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_ResolveIntent{ResolveIntent: &rpcpb.ResolveIntentResponse{}}}, nil
}
