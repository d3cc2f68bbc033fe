package eval

import (
	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// PlainGet reads an unversioned key (status table, heartbeats, meta).
func init() {
	register(rpcpb.MethodPlainGet, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			add(pointSpan(ru.GetPlainGet().GetKey(), concurrency.Read))
		},
		EvalRead: evalPlainGet,
	})
}

func evalPlainGet(c Context, r storage.Reader, ru *rpcpb.RequestUnion) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	g := ru.GetPlainGet()
	if !ContainsKey(c.Desc, g.Key) {
		return nil, Mismatch(c.Desc, g.Key)
	}
	v, found, err := mvcc.GetPlain(r, g.Key)
	if err != nil {
		return nil, Error(err)
	}
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_PlainGet{PlainGet: &rpcpb.PlainGetResponse{Found: found, Value: v}}}, nil
}
