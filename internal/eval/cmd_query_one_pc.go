package eval

import (
	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// QueryOnePC settles a one-phase commit whose reply was lost, at its first
// written key, under that key's write latch (so after every write in flight
// on it; after a leader change, after every entry of earlier terms):
//
//   - the key's 1PC record names txn_start: committed at its commit_ts;
//   - the key has no version above txn_start: the batch has not applied
//     (it would have written one); txn_start is refused at the key, so that
//     the batch can never apply: prevented;
//   - otherwise: settled (a batch that did not apply now meets the newer
//     version) but unknown; neither flag is set.
//
// Below the GC threshold the versions may be gone, so the answer is the
// unknown one unless the record still names txn_start.
func init() {
	register(rpcpb.MethodQueryOnePC, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			add(pointSpan(ru.GetQueryOnePc().GetKey(), concurrency.Write))
		},
		EvalWrite: evalQueryOnePC,
	})
}

func evalQueryOnePC(c Context, rw storage.ReadWriter, ru *rpcpb.RequestUnion, _ *Effects) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	q := ru.GetQueryOnePc()
	if !ContainsKey(c.Desc, q.GetKey()) {
		return nil, Mismatch(c.Desc, q.GetKey())
	}
	out := &rpcpb.QueryOnePCResponse{}
	resp := &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_QueryOnePc{QueryOnePc: out}}
	rec, err := loadKeyRecord(rw, q.GetKey())
	if err != nil {
		return nil, Error(err)
	}
	if ct, ok := rec.onePCCommit(q.GetTxnStart()); ok {
		out.Committed, out.CommitTs = true, ct
		return resp, nil
	}
	if rec.refuses(q.GetTxnStart()) {
		out.Prevented = true
		return resp, nil
	}
	if q.GetTxnStart() < c.GCThreshold {
		return resp, nil
	}
	newest, err := newestVersionTs(rw, q.GetKey())
	if err != nil {
		return nil, Error(err)
	}
	if newest > q.GetTxnStart() {
		return resp, nil
	}
	if err := rec.refuse(q.GetTxnStart()); err != nil {
		return nil, Error(err)
	}
	if err := storeKeyRecord(rw, q.GetKey(), rec); err != nil {
		return nil, Error(err)
	}
	out.Prevented = true
	return resp, nil
}
