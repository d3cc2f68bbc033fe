package eval

import (
	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// PlainPutUnlessExists writes an unversioned key only if it has no value;
// otherwise it returns the existing value. It is the status table's commit
// point (I1): exactly one of a transaction's commit and its abort wins.
func init() {
	register(rpcpb.MethodPlainPutUnlessExists, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			add(pointSpan(ru.GetPlainPutUnlessExists().GetKey(), concurrency.Write))
		},
		EvalWrite: evalPlainPutUnlessExists,
	})
}

func evalPlainPutUnlessExists(c Context, rw storage.ReadWriter, ru *rpcpb.RequestUnion, _ *Effects) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	p := ru.GetPlainPutUnlessExists()
	if !ContainsKey(c.Desc, p.Key) {
		return nil, Mismatch(c.Desc, p.Key)
	}
	ok, existing, err := mvcc.PutPlainUnlessExists(rw, p.Key, p.Value)
	if err != nil {
		return nil, Error(err)
	}
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_PlainPutUnlessExists{PlainPutUnlessExists: &rpcpb.PlainPutUnlessExistsResponse{Succeeded: ok, Existing: existing}}}, nil
}
