package eval

import (
	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// PlainPut writes (or deletes) an unversioned key.
func init() {
	register(rpcpb.MethodPlainPut, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			add(pointSpan(ru.GetPlainPut().GetKey(), concurrency.Write))
		},
		EvalWrite: evalPlainPut,
	})
}

func evalPlainPut(c Context, rw storage.ReadWriter, ru *rpcpb.RequestUnion, _ *Effects) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	p := ru.GetPlainPut()
	if !ContainsKey(c.Desc, p.Key) {
		return nil, Mismatch(c.Desc, p.Key)
	}
	var err error
	if p.Delete {
		err = mvcc.DeletePlain(rw, p.Key)
	} else {
		err = mvcc.PutPlain(rw, p.Key, p.Value)
	}
	if err != nil {
		return nil, Error(err)
	}
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_PlainPut{PlainPut: &rpcpb.PlainPutResponse{}}}, nil
}
