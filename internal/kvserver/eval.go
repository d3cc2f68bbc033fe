package kvserver

import (
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// Limits of evaluation.
const (
	// ScanKeysMax caps the keys one scan returns; the rest is resumed.
	ScanKeysMax = 10000
	// ScanBytesMax caps the bytes one scan returns; the rest is resumed.
	ScanBytesMax = 4 << 20
)

func mismatch(desc *rpcpb.RangeDescriptor, key []byte) *rpcpb.Error {
	e := pbErr(rpcpb.ErrorCode_RANGE_KEY_MISMATCH, "key %q is outside range r%d [%q, %q)", key, desc.GetRangeId(), desc.GetStartKey(), desc.GetEndKey())
	e.Range = desc
	return e
}

// evalWrite applies the write requests of a batch into b, all or nothing:
// the first error is returned in the response and the caller discards b.
// It runs at Raft apply time on every replica: deterministic.
func evalWrite(b *storage.Batch, desc *rpcpb.RangeDescriptor, req *rpcpb.BatchRequest, writeTs uint64) *rpcpb.BatchResponse {
	resp := &rpcpb.BatchResponse{Responses: make([]*rpcpb.ResponseUnion, 0, len(req.Requests))}
	fail := func(e *rpcpb.Error) *rpcpb.BatchResponse { return &rpcpb.BatchResponse{Error: e} }
	for _, ru := range req.Requests {
		var out rpcpb.ResponseUnion
		switch r := ru.Value.(type) {
		case *rpcpb.RequestUnion_PutIntent:
			p := r.PutIntent
			if !containsKey(desc, p.Key) {
				return fail(mismatch(desc, p.Key))
			}
			txn := mvcc.TxnMeta{StartTs: p.Txn.GetStartTs(), HeartbeatKey: p.Txn.GetHeartbeatKey()}
			if err := mvcc.PutIntent(b, p.Key, p.Value, p.Delete, txn); err != nil {
				return fail(evalErr(err))
			}
			out.Value = &rpcpb.ResponseUnion_PutIntent{PutIntent: &rpcpb.PutIntentResponse{}}
		case *rpcpb.RequestUnion_ResolveIntent:
			p := r.ResolveIntent
			if !containsKey(desc, p.Key) {
				return fail(mismatch(desc, p.Key))
			}
			if _, err := mvcc.ResolveIntent(b, p.Key, p.TxnStart, p.CommitTs); err != nil {
				return fail(evalErr(err))
			}
			out.Value = &rpcpb.ResponseUnion_ResolveIntent{ResolveIntent: &rpcpb.ResolveIntentResponse{}}
		case *rpcpb.RequestUnion_Put:
			p := r.Put
			if !containsKey(desc, p.Key) {
				return fail(mismatch(desc, p.Key))
			}
			if writeTs == 0 {
				return fail(pbErr(rpcpb.ErrorCode_INTERNAL, "put without a write timestamp"))
			}
			if err := mvcc.PutCommitted(b, p.Key, p.Value, p.Delete, writeTs); err != nil {
				return fail(evalErr(err))
			}
			out.Value = &rpcpb.ResponseUnion_Put{Put: &rpcpb.PutResponse{Ts: writeTs}}
		case *rpcpb.RequestUnion_PlainPut:
			p := r.PlainPut
			if !containsKey(desc, p.Key) {
				return fail(mismatch(desc, p.Key))
			}
			var err error
			if p.Delete {
				err = mvcc.DeletePlain(b, p.Key)
			} else {
				err = mvcc.PutPlain(b, p.Key, p.Value)
			}
			if err != nil {
				return fail(evalErr(err))
			}
			out.Value = &rpcpb.ResponseUnion_PlainPut{PlainPut: &rpcpb.PlainPutResponse{}}
		case *rpcpb.RequestUnion_PlainPutUnlessExists:
			p := r.PlainPutUnlessExists
			if !containsKey(desc, p.Key) {
				return fail(mismatch(desc, p.Key))
			}
			ok, existing, err := mvcc.PutPlainUnlessExists(b, p.Key, p.Value)
			if err != nil {
				return fail(evalErr(err))
			}
			out.Value = &rpcpb.ResponseUnion_PlainPutUnlessExists{PlainPutUnlessExists: &rpcpb.PlainPutUnlessExistsResponse{Succeeded: ok, Existing: existing}}
		default:
			return fail(pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "request %T cannot be mixed with writes", ru.Value))
		}
		resp.Responses = append(resp.Responses, &out)
	}
	return resp
}

// evalRead evaluates read requests on r, a snapshot current with the log.
// A read at a timestamp below gcThreshold is refused: versions it needs may
// have been collected.
func evalRead(r storage.Reader, desc *rpcpb.RangeDescriptor, gcThreshold uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
	resp := &rpcpb.BatchResponse{Responses: make([]*rpcpb.ResponseUnion, 0, len(req.Requests))}
	fail := func(e *rpcpb.Error) *rpcpb.BatchResponse { return &rpcpb.BatchResponse{Error: e} }
	belowGC := func(ts uint64) *rpcpb.BatchResponse {
		return fail(pbErr(rpcpb.ErrorCode_TS_BELOW_GC_THRESHOLD, "timestamp %d is below range r%d's GC threshold %d (versions older than the GC TTL are collected)", ts, desc.GetRangeId(), gcThreshold))
	}
	for _, ru := range req.Requests {
		switch q := ru.Value.(type) {
		case *rpcpb.RequestUnion_Get:
			if q.Get.Ts != 0 && q.Get.Ts < gcThreshold {
				return belowGC(q.Get.Ts)
			}
		case *rpcpb.RequestUnion_Scan:
			if q.Scan.Ts != 0 && q.Scan.Ts < gcThreshold {
				return belowGC(q.Scan.Ts)
			}
		case *rpcpb.RequestUnion_Refresh:
			if q.Refresh.FromTs < gcThreshold {
				return belowGC(q.Refresh.FromTs)
			}
		}
	}
	for _, ru := range req.Requests {
		var out rpcpb.ResponseUnion
		switch q := ru.Value.(type) {
		case *rpcpb.RequestUnion_Get:
			g := q.Get
			if !containsKey(desc, g.Key) {
				return fail(mismatch(desc, g.Key))
			}
			v, ts, found, err := mvcc.Get(r, g.Key, g.Ts, g.TxnStart)
			if err != nil {
				return fail(evalErr(err))
			}
			out.Value = &rpcpb.ResponseUnion_Get{Get: &rpcpb.GetResponse{Found: found, Value: v, Ts: ts}}
		case *rpcpb.RequestUnion_Scan:
			s := q.Scan
			if !containsKey(desc, s.Start) {
				return fail(mismatch(desc, s.Start))
			}
			// The scan is clamped to the range; the client continues from
			// resume_key on the next range.
			end, clamped := s.End, false
			if len(end) == 0 || string(end) > string(desc.EndKey) {
				end, clamped = desc.EndKey, true
			}
			limit := int(s.Limit)
			if limit <= 0 || limit > ScanKeysMax {
				limit = ScanKeysMax
			}
			kvs, resume, err := mvcc.Scan(r, s.Start, end, s.Ts, s.TxnStart, limit, ScanBytesMax)
			if err != nil {
				return fail(evalErr(err))
			}
			if len(resume) == 0 && clamped && (s.Limit == 0 || len(kvs) < int(s.Limit)) && string(end) != string(s.End) {
				resume = end
			}
			sr := &rpcpb.ScanResponse{ResumeKey: resume}
			for _, kv := range kvs {
				sr.Kvs = append(sr.Kvs, &rpcpb.KeyValue{Key: kv.Key, Value: kv.Value, Ts: kv.Ts})
			}
			out.Value = &rpcpb.ResponseUnion_Scan{Scan: sr}
		case *rpcpb.RequestUnion_PlainGet:
			g := q.PlainGet
			if !containsKey(desc, g.Key) {
				return fail(mismatch(desc, g.Key))
			}
			v, found, err := mvcc.GetPlain(r, g.Key)
			if err != nil {
				return fail(evalErr(err))
			}
			out.Value = &rpcpb.ResponseUnion_PlainGet{PlainGet: &rpcpb.PlainGetResponse{Found: found, Value: v}}
		case *rpcpb.RequestUnion_Refresh:
			f := q.Refresh
			for _, sp := range f.Spans {
				if !containsSpan(desc, sp.Start, sp.End) {
					return fail(mismatch(desc, sp.Start))
				}
				if err := mvcc.Refresh(r, sp.Start, sp.End, f.FromTs, f.ToTs, f.TxnStart); err != nil {
					return fail(evalErr(err))
				}
			}
			out.Value = &rpcpb.ResponseUnion_Refresh{Refresh: &rpcpb.RefreshResponse{}}
		default:
			return fail(pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "request %T cannot be mixed with reads", ru.Value))
		}
		resp.Responses = append(resp.Responses, &out)
	}
	return resp
}
