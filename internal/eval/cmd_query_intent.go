package eval

import (
	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// QueryIntent proves a pipelined write: it reports whether the transaction
// holds the intent at the key with the expected value. Its read latch waits
// for a write in flight on the key, so the answer covers every write of the
// transaction proposed before it.
func init() {
	register(rpcpb.MethodQueryIntent, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			add(pointSpan(ru.GetQueryIntent().GetKey(), concurrency.Read))
		},
		EvalRead: evalQueryIntent,
	})
}

func evalQueryIntent(c Context, r storage.Reader, ru *rpcpb.RequestUnion) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	q := ru.GetQueryIntent()
	if !ContainsKey(c.Desc, q.Key) {
		return nil, Mismatch(c.Desc, q.Key)
	}
	iv, found, err := mvcc.GetIntent(r, q.Key)
	if err != nil {
		return nil, Error(err)
	}
	found = found && iv.Txn.StartTs == q.TxnStart && rpcpb.IntentValueHash(iv.Value, iv.IsDelete) == q.ValueHash
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_QueryIntent{QueryIntent: &rpcpb.QueryIntentResponse{Found: found}}}, nil
}
