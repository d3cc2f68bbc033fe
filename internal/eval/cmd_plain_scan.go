package eval

import (
	"bytes"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// PlainScanKeysMax caps the pairs one plain scan returns; the rest is
// resumed. Status records are a few bytes each, so the key count, not
// ScanBytesMax, is the limit that binds in practice; both are enforced.
const PlainScanKeysMax = ScanKeysMax

// PlainScan reads the plain keys of [start, end), clamped to the range, in
// key order: the status table's range scan (debug txns, backup). The span
// must stay out of the user keyspace, whose plain slots hold protocol
// records (keyrecord.go), and must have an end.
func init() {
	register(rpcpb.MethodPlainScan, &Command{
		Declare: func(ru *rpcpb.RequestUnion, desc *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			s := ru.GetPlainScan()
			end, _ := clampEnd(desc, s.End)
			add(spanOf(s.Start, end, concurrency.Read))
		},
		EvalRead: evalPlainScan,
	})
}

func evalPlainScan(c Context, r storage.Reader, ru *rpcpb.RequestUnion) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	s := ru.GetPlainScan()
	if len(s.End) == 0 || bytes.Compare(s.Start, s.End) >= 0 {
		return nil, rpcpb.NewError(rpcpb.ErrorCode_INVALID_ARGUMENT, "plain scan [%q, %q) is empty or has no end", s.Start, s.End)
	}
	// [start, end) meets [UserPrefix, UserEnd) unless it ends before it
	// or starts after it.
	if bytes.Compare(s.End, keys.UserPrefix) > 0 && bytes.Compare(s.Start, keys.UserEnd) < 0 {
		return nil, rpcpb.NewError(rpcpb.ErrorCode_INVALID_ARGUMENT, "plain scan [%q, %q) reaches user keys: plain scans are for system keys only", s.Start, s.End)
	}
	if !ContainsKey(c.Desc, s.Start) {
		return nil, Mismatch(c.Desc, s.Start)
	}
	end, clamped := clampEnd(c.Desc, s.End)
	limit := int(s.Limit)
	if limit <= 0 || limit > PlainScanKeysMax {
		limit = PlainScanKeysMax
	}
	kvs, resume, err := mvcc.ScanPlainBounded(r, s.Start, end, limit, ScanBytesMax)
	if err != nil {
		return nil, Error(err)
	}
	out := &rpcpb.PlainScanResponse{Kvs: make([]*rpcpb.PlainKeyValue, 0, len(kvs))}
	for _, kv := range kvs {
		out.Kvs = append(out.Kvs, &rpcpb.PlainKeyValue{Key: kv.Key, Value: kv.Value})
	}
	if len(resume) == 0 && clamped && !bytes.Equal(end, s.End) && (s.Limit == 0 || len(out.Kvs) < int(s.Limit)) {
		resume = end
	}
	out.ResumeKey = resume
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_PlainScan{PlainScan: out}}, nil
}
