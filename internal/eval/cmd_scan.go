package eval

import (
	"bytes"
	"github.com/canopy-db/canopy/internal/concurrency"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// Limits of a scan's response.
const (
	// ScanKeysMax caps the keys one scan returns; the rest is resumed.
	ScanKeysMax = 10000
	// ScanBytesMax caps the bytes one scan returns; the rest is resumed.
	ScanBytesMax = 4 << 20
)

// Scan reads the keys of [start, end) at a timestamp. It is clamped to the
// range: the client continues from resume_key on the next range.
func init() {
	register(rpcpb.MethodScan, &Command{
		Declare: func(ru *rpcpb.RequestUnion, desc *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			s := ru.GetScan()
			end, _ := clampEnd(desc, s.End)
			add(spanOf(s.Start, end, concurrency.Read))
		},
		EvalRead: evalScan,
	})
}

// clampEnd returns the scan's end within desc, and whether it was clamped.
func clampEnd(desc *rpcpb.RangeDescriptor, end []byte) ([]byte, bool) {
	if len(end) == 0 {
		if desc == nil {
			return keys.MaxKey, true
		}
		return desc.EndKey, true
	}
	if desc != nil && bytes.Compare(end, desc.EndKey) > 0 {
		return desc.EndKey, true
	}
	return end, false
}

func evalScan(c Context, r storage.Reader, ru *rpcpb.RequestUnion) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	s := ru.GetScan()
	if s.Ts != 0 && s.Ts < c.GCThreshold {
		return nil, belowGC(c, s.Ts)
	}
	if !ContainsKey(c.Desc, s.Start) {
		return nil, Mismatch(c.Desc, s.Start)
	}
	end, clamped := clampEnd(c.Desc, s.End)
	limit := int(s.Limit)
	if limit <= 0 || limit > ScanKeysMax {
		limit = ScanKeysMax
	}
	kvs, resume, err := mvcc.Scan(r, s.Start, end, s.Ts, s.TxnStart, limit, ScanBytesMax)
	if err != nil {
		return nil, Error(err)
	}
	if len(resume) == 0 && clamped && (s.Limit == 0 || len(kvs) < int(s.Limit)) && !bytes.Equal(end, s.End) {
		resume = end
	}
	sr := &rpcpb.ScanResponse{ResumeKey: resume, Kvs: make([]*rpcpb.KeyValue, 0, len(kvs))}
	for _, kv := range kvs {
		sr.Kvs = append(sr.Kvs, &rpcpb.KeyValue{Key: kv.Key, Value: kv.Value, Ts: kv.Ts})
	}
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_Scan{Scan: sr}}, nil
}
