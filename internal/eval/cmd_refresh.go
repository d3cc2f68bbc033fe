package eval

import (
	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// Refresh checks that nothing but the transaction itself wrote in its read
// spans in (from_ts, to_ts]: a serializable transaction's reads are then
// still valid at its commit timestamp.
func init() {
	register(rpcpb.MethodRefresh, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			for _, sp := range ru.GetRefresh().GetSpans() {
				add(spanOf(sp.Start, sp.End, concurrency.Read))
			}
		},
		EvalRead: evalRefresh,
	})
}

func evalRefresh(c Context, r storage.Reader, ru *rpcpb.RequestUnion) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	f := ru.GetRefresh()
	if f.FromTs < c.GCThreshold {
		return nil, belowGC(c, f.FromTs)
	}
	for _, sp := range f.Spans {
		if !ContainsSpan(c.Desc, sp.Start, sp.End) {
			return nil, Mismatch(c.Desc, sp.Start)
		}
		if err := mvcc.Refresh(r, sp.Start, sp.End, f.FromTs, f.ToTs, f.TxnStart); err != nil {
			return nil, Error(err)
		}
	}
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_Refresh{Refresh: &rpcpb.RefreshResponse{}}}, nil
}
