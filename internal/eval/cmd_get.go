package eval

import (
	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// Get reads one key at a timestamp (or, with txn_start, as that
// transaction, which sees its own intent).
func init() {
	register(rpcpb.MethodGet, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			add(pointSpan(ru.GetGet().GetKey(), concurrency.Read))
		},
		EvalRead: evalGet,
	})
}

func evalGet(c Context, r storage.Reader, ru *rpcpb.RequestUnion) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	g := ru.GetGet()
	if g.Ts != 0 && g.Ts < c.GCThreshold {
		return nil, belowGC(c, g.Ts)
	}
	if !ContainsKey(c.Desc, g.Key) {
		return nil, Mismatch(c.Desc, g.Key)
	}
	v, ts, found, err := mvcc.Get(r, g.Key, g.Ts, g.TxnStart)
	if err != nil {
		return nil, Error(err)
	}
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_Get{Get: &rpcpb.GetResponse{Found: found, Value: v, Ts: ts}}}, nil
}
