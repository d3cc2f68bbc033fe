package etcdapi

import (
	"bytes"
	"context"
	"errors"
	"math"
	"sort"

	"github.com/canopy-db/canopy/client"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// kvServer is etcd's KV service. Every request is one Canopy transaction
// (client.DB.Txn, serializable), so an etcd Txn, with its compares and
// all its operations, is atomic and isolated exactly as one Canopy
// transaction is; its revision is the transaction's commit timestamp
// (or, for a request that writes nothing, its start timestamp).
type kvServer struct{ s *Server }

func (k *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	var out *pb.RangeResponse
	rev, err := k.s.run(ctx, func(ctx context.Context, x *txnExec) error {
		var err error
		out, err = x.rangeOp(ctx, r)
		return err
	})
	if err != nil {
		return nil, err
	}
	out.Header = k.s.header(rev)
	return out, nil
}

func (k *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	var out *pb.PutResponse
	rev, err := k.s.run(ctx, func(ctx context.Context, x *txnExec) error {
		var err error
		out, err = x.put(ctx, r)
		return err
	})
	if err != nil {
		return nil, err
	}
	out.Header = k.s.header(rev)
	return out, nil
}

func (k *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	var out *pb.DeleteRangeResponse
	rev, err := k.s.run(ctx, func(ctx context.Context, x *txnExec) error {
		var err error
		out, err = x.deleteRange(ctx, r)
		return err
	})
	if err != nil {
		return nil, err
	}
	out.Header = k.s.header(rev)
	return out, nil
}

func (k *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := k.s.checkTxn(r); err != nil {
		return nil, err
	}
	var out *pb.TxnResponse
	var x0 *txnExec
	rev, err := k.s.run(ctx, func(ctx context.Context, x *txnExec) error {
		var err error
		x0 = x
		out, err = x.txnOp(ctx, r)
		return err
	})
	if err != nil {
		return nil, err
	}
	out.Header = k.s.header(rev)
	for _, h := range x0.headers {
		*h = *out.Header
	}
	return out, nil
}

// Compact records rev as the compacted revision: reads at an older
// revision and watches from one get ErrCompacted from then on. It removes
// nothing itself: Canopy's version GC (the cluster's GC TTL) does
// (docs/ETCD-API.md).
func (k *kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	rev, err := k.s.run(ctx, func(ctx context.Context, x *txnExec) error {
		cur, err := x.compacted(ctx)
		if err != nil {
			return err
		}
		if r.Revision <= cur {
			return rpctypes.ErrGRPCCompacted
		}
		if r.Revision > int64(x.txn.StartTs()) {
			return rpctypes.ErrGRPCFutureRev
		}
		x.writes++
		return x.bufPut(ctx, compactKey, encodeRev(r.Revision))
	})
	if err != nil {
		return nil, err
	}
	return &pb.CompactionResponse{Header: k.s.header(rev)}, nil
}

func encodeRev(rev int64) []byte {
	return []byte{byte(rev >> 56), byte(rev >> 48), byte(rev >> 40), byte(rev >> 32), byte(rev >> 24), byte(rev >> 16), byte(rev >> 8), byte(rev)}
}

func decodeRev(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, errCorrupt
	}
	var v int64
	for _, c := range b {
		v = v<<8 | int64(c)
	}
	return v, nil
}

// checkTxn applies etcd's limit on the operations of a Txn, at every
// level of nesting.
func (s *Server) checkTxn(r *pb.TxnRequest) error {
	max := s.opts.TxnOpsMax
	if len(r.Compare) > max || len(r.Success) > max || len(r.Failure) > max {
		return rpctypes.ErrGRPCTooManyOps
	}
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if t := op.GetRequestTxn(); t != nil {
				if err := s.checkTxn(t); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// run runs fn in one Canopy transaction (retried on conflicts as
// client.DB.Txn does) and returns the revision of the request: the commit
// timestamp if fn wrote, else the start timestamp. Revisions of the
// transaction's own writes that fn returned are filled in.
func (s *Server) run(ctx context.Context, fn func(ctx context.Context, x *txnExec) error) (int64, error) {
	db, err := s.db(ctx)
	if err != nil {
		return 0, err
	}
	var x *txnExec
	err = db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		x = &txnExec{s: s, db: db, txn: txn, pending: map[*mvccpb.KeyValue]struct{}{}}
		if err := fn(ctx, x); err != nil {
			return err
		}
		if p := db.Protocol(); x.writes > 0 && !writesUnder(p) {
			return status.Errorf(codes.FailedPrecondition, "etcdapi: this cluster runs the %s commit protocol, whose transactions may not read a range and write, and are serializable but not linearizable; "+
				"the etcd API writes only on clusters that run default or 2pc-locking (canopy init --commit-protocol); reads are served", p)
		}
		return x.finish(ctx)
	})
	if err != nil {
		return 0, toStatus(err)
	}
	if x.writes == 0 {
		return int64(x.txn.StartTs()), nil
	}
	rev := int64(x.txn.CommitTs())
	for kv := range x.pending {
		if kv.ModRevision == 0 {
			kv.ModRevision = rev
		}
		if kv.CreateRevision == 0 {
			kv.CreateRevision = rev
		}
	}
	return rev, nil
}

// writesUnder says whether the etcd API writes on a cluster running
// protocol p. Its requests read ranges (a put reads the key's metadata by
// a scan) and then write, which the hierarchy protocols refuse (their
// validators check keys, not spans), and etcd promises linearizable
// writes, which they do not give.
func writesUnder(p client.Protocol) bool {
	return p == client.ProtocolDefault || p == client.Protocol2PCLocking
}

// txnExec runs etcd operations inside one Canopy transaction.
type txnExec struct {
	s   *Server
	db  *client.DB
	txn *client.Txn
	// pending are the key-values read from the transaction's own writes:
	// their mod_revision (and create_revision, for a key created here) is
	// the commit timestamp, 0 until run fills it in.
	pending map[*mvccpb.KeyValue]struct{}
	// writes counts the operations that wrote.
	writes int
	// written holds the data keys this transaction wrote: a read of one
	// sees the transaction's own write, whose revision is the commit
	// timestamp (the Ts a scan reports for it is not).
	written map[string]struct{}
	// putKeys and deleted find etcd's "duplicate key given in txn
	// request" (a key put twice, or put and deleted, in one Txn).
	putKeys map[string]struct{}
	deleted [][2][]byte
	// headers are the sub-responses' headers, filled in after commit.
	headers []*pb.ResponseHeader
	// buffered are writes not yet sent, flushed whether they have been
	// (buffer.go).
	buffered []client.Write
	flushed  bool
}

func (x *txnExec) wrote(k []byte) {
	if x.written == nil {
		x.written = map[string]struct{}{}
	}
	x.written[string(k)] = struct{}{}
}

// rev orders a revision that is still the commit timestamp (0, pending)
// after every committed one.
func (x *txnExec) rev(kv *mvccpb.KeyValue, r int64) int64 {
	if _, ok := x.pending[kv]; ok && r == 0 {
		return math.MaxInt64
	}
	return r
}

// decode turns a Canopy key-value of the data keyspace into etcd's.
func (x *txnExec) decode(c client.KeyValue) (*mvccpb.KeyValue, error) {
	if !bytes.HasPrefix(c.Key, dataPrefix) {
		return nil, errCorrupt
	}
	e, v, err := decodeEnvelope(c.Value)
	if err != nil {
		return nil, err
	}
	kv := &mvccpb.KeyValue{Key: bytes.Clone(c.Key[len(dataPrefix):]), Value: v, Version: e.version,
		Lease: e.lease, ModRevision: int64(c.Ts), CreateRevision: e.create}
	if e.create == 0 {
		kv.CreateRevision = int64(c.Ts)
	}
	if _, own := x.written[string(c.Key)]; own || c.Ts == 0 {
		kv.ModRevision = 0
		if e.create == 0 {
			kv.CreateRevision = 0
		}
		x.pending[kv] = struct{}{}
	}
	return kv, nil
}

// scanFunc reads a page of Canopy keys.
type scanFunc func(ctx context.Context, start, end []byte, limit int) ([]client.KeyValue, error)

// scan calls fn with every key of [start, end) of the data keyspace, in
// key order, at most Options.RangeKeysMax of them.
func (x *txnExec) scan(ctx context.Context, read scanFunc, start, end []byte, fn func(*mvccpb.KeyValue) (more bool)) error {
	n := 0
	for {
		kvs, err := read(ctx, start, end, scanPageKeys)
		if err != nil {
			return err
		}
		for _, c := range kvs {
			if n++; n > x.s.opts.RangeKeysMax {
				return status.Errorf(codes.InvalidArgument,
					"etcdapi: a range read more than %d keys (etcdapi.Options.RangeKeysMax); narrow it or use a limit with a later key", x.s.opts.RangeKeysMax)
			}
			kv, err := x.decode(c)
			if err != nil {
				return err
			}
			if !fn(kv) {
				return nil
			}
		}
		if len(kvs) < scanPageKeys {
			return nil
		}
		start = append(bytes.Clone(kvs[len(kvs)-1].Key), 0)
	}
}

// all returns every key of etcd's [key, rangeEnd) in the transaction.
func (x *txnExec) all(ctx context.Context, key, rangeEnd []byte) ([]*mvccpb.KeyValue, error) {
	start, end := dataSpan(key, rangeEnd)
	var out []*mvccpb.KeyValue
	err := x.scan(ctx, x.bufScan, start, end, func(kv *mvccpb.KeyValue) bool {
		out = append(out, kv)
		return true
	})
	return out, err
}

// get returns key's key-value, nil if it does not exist.
func (x *txnExec) get(ctx context.Context, key []byte) (*mvccpb.KeyValue, error) {
	kvs, err := x.all(ctx, key, nil)
	if err != nil || len(kvs) == 0 {
		return nil, err
	}
	return kvs[0], nil
}

// compacted returns the compacted revision (0: none).
func (x *txnExec) compacted(ctx context.Context) (int64, error) {
	v, ok, err := x.bufGet(ctx, compactKey)
	if err != nil || !ok {
		return 0, err
	}
	return decodeRev(v)
}

func checkKey(k []byte) error {
	if len(k) == 0 {
		return rpctypes.ErrGRPCEmptyKey
	}
	if len(k) > KeyBytesMax {
		return status.Errorf(codes.InvalidArgument, "etcdapi: key of %d bytes is longer than %d bytes (etcdapi.KeyBytesMax)", len(k), KeyBytesMax)
	}
	return nil
}

func (x *txnExec) rangeOp(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := checkKey(r.Key); err != nil {
		return nil, err
	}
	if _, ok := pb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return nil, rpctypes.ErrGRPCInvalidSortOption
	}
	if _, ok := pb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return nil, rpctypes.ErrGRPCInvalidSortOption
	}
	read := scanFunc(x.bufScan)
	if r.Revision > 0 {
		if r.Revision > int64(x.txn.StartTs()) {
			return nil, rpctypes.ErrGRPCFutureRev
		}
		c, err := x.compacted(ctx)
		if err != nil {
			return nil, err
		}
		if r.Revision < c {
			return nil, rpctypes.ErrGRPCCompacted
		}
		read = func(ctx context.Context, start, end []byte, limit int) ([]client.KeyValue, error) {
			kvs, err := x.db.ScanAt(ctx, start, end, uint64(r.Revision), limit)
			if errors.Is(err, client.ErrInvalidArgument) {
				// The only argument left to refuse: a timestamp below
				// the range's version-GC threshold.
				return nil, status.Errorf(codes.OutOfRange, "%s (%v)", rpctypes.ErrGRPCCompacted.Error(), err)
			}
			return kvs, err
		}
	}
	sortOrder := r.SortOrder
	if r.SortTarget != pb.RangeRequest_KEY && sortOrder == pb.RangeRequest_NONE {
		sortOrder = pb.RangeRequest_ASCEND
	} else if r.SortTarget == pb.RangeRequest_KEY && sortOrder == pb.RangeRequest_ASCEND {
		sortOrder = pb.RangeRequest_NONE // keys come in ascending order
	}
	filtered := r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
	// Without sorting or filters, only the first limit+1 keys are kept
	// (the rest are counted).
	keep := math.MaxInt
	if sortOrder == pb.RangeRequest_NONE && !filtered && r.Limit > 0 {
		keep = int(r.Limit) + 1
	}
	start, end := dataSpan(r.Key, r.RangeEnd)
	var kvs []*mvccpb.KeyValue
	count := 0
	sx := x
	if r.Revision > 0 {
		// A read of the past: no version it reads is this
		// transaction's own.
		sx = &txnExec{s: x.s, pending: map[*mvccpb.KeyValue]struct{}{}}
	}
	err := sx.scan(ctx, read, start, end, func(kv *mvccpb.KeyValue) bool {
		count++
		if filtered && !x.passes(r, kv) {
			return true
		}
		if len(kvs) < keep {
			kvs = append(kvs, kv)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	if sortOrder != pb.RangeRequest_NONE {
		less := x.lessBy(r.SortTarget)
		if sortOrder == pb.RangeRequest_DESCEND {
			sort.SliceStable(kvs, func(i, j int) bool { return less(kvs[j], kvs[i]) })
		} else {
			sort.SliceStable(kvs, func(i, j int) bool { return less(kvs[i], kvs[j]) })
		}
	}
	resp := &pb.RangeResponse{Count: int64(count)}
	if r.Limit > 0 && len(kvs) > int(r.Limit) {
		kvs, resp.More = kvs[:r.Limit], true
	}
	if r.CountOnly {
		return resp, nil
	}
	if r.KeysOnly {
		for i, kv := range kvs {
			c := *kv
			c.Value = nil
			if _, ok := x.pending[kv]; ok {
				x.pending[&c] = struct{}{}
			}
			kvs[i] = &c
		}
	}
	resp.Kvs = kvs
	return resp, nil
}

// passes applies a Range's revision filters.
func (x *txnExec) passes(r *pb.RangeRequest, kv *mvccpb.KeyValue) bool {
	mod, create := x.rev(kv, kv.ModRevision), x.rev(kv, kv.CreateRevision)
	return (r.MinModRevision == 0 || mod >= r.MinModRevision) &&
		(r.MaxModRevision == 0 || mod <= r.MaxModRevision) &&
		(r.MinCreateRevision == 0 || create >= r.MinCreateRevision) &&
		(r.MaxCreateRevision == 0 || create <= r.MaxCreateRevision)
}

func (x *txnExec) lessBy(t pb.RangeRequest_SortTarget) func(a, b *mvccpb.KeyValue) bool {
	switch t {
	case pb.RangeRequest_VERSION:
		return func(a, b *mvccpb.KeyValue) bool { return a.Version < b.Version }
	case pb.RangeRequest_CREATE:
		return func(a, b *mvccpb.KeyValue) bool { return x.rev(a, a.CreateRevision) < x.rev(b, b.CreateRevision) }
	case pb.RangeRequest_MOD:
		return func(a, b *mvccpb.KeyValue) bool { return x.rev(a, a.ModRevision) < x.rev(b, b.ModRevision) }
	case pb.RangeRequest_VALUE:
		return func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Value, b.Value) < 0 }
	}
	return func(a, b *mvccpb.KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }
}

// leaseLive says whether lease id exists and has not expired.
func (x *txnExec) leaseLive(ctx context.Context, id int64) (leaseRecord, bool, error) {
	v, ok, err := x.bufGet(ctx, leaseKey(id))
	if err != nil || !ok {
		return leaseRecord{}, false, err
	}
	rec, err := decodeLease(v)
	if err != nil {
		return leaseRecord{}, false, err
	}
	return rec, !rec.expired(physicalMs(x.txn.StartTs())), nil
}

func (x *txnExec) put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := checkKey(r.Key); err != nil {
		return nil, err
	}
	if r.IgnoreValue && len(r.Value) != 0 {
		return nil, rpctypes.ErrGRPCValueProvided
	}
	if r.IgnoreLease && r.Lease != 0 {
		return nil, rpctypes.ErrGRPCLeaseProvided
	}
	if err := x.notDuplicate(r.Key, true); err != nil {
		return nil, err
	}
	prev, err := x.get(ctx, r.Key)
	if err != nil {
		return nil, err
	}
	if (r.IgnoreValue || r.IgnoreLease) && prev == nil {
		return nil, rpctypes.ErrGRPCKeyNotFound
	}
	value, lease := r.Value, r.Lease
	if r.IgnoreValue {
		value = prev.Value
	}
	if r.IgnoreLease {
		lease = prev.Lease
	}
	if lease != 0 {
		// Also when the key is already attached to it: the lease may
		// have expired, its revocation not yet done.
		_, live, err := x.leaseLive(ctx, lease)
		if err != nil {
			return nil, err
		}
		if !live {
			return nil, rpctypes.ErrGRPCLeaseNotFound
		}
	}
	e := envelope{version: 1, lease: lease}
	if prev != nil {
		e.version, e.create = prev.Version+1, prev.CreateRevision
	}
	if prev != nil && prev.Lease != 0 && prev.Lease != lease {
		if err := x.bufDelete(ctx, indexKey(prev.Lease, r.Key)); err != nil {
			return nil, err
		}
	}
	if lease != 0 && (prev == nil || prev.Lease != lease) {
		if err := x.bufPut(ctx, indexKey(lease, r.Key), []byte{1}); err != nil {
			return nil, err
		}
	}
	if err := x.bufPut(ctx, dataKey(r.Key), encodeEnvelope(e, value)); err != nil {
		return nil, err
	}
	x.wrote(dataKey(r.Key))
	x.writes++
	resp := &pb.PutResponse{}
	if r.PrevKv && prev != nil {
		resp.PrevKv = prev
	}
	return resp, nil
}

func (x *txnExec) deleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := checkKey(r.Key); err != nil {
		return nil, err
	}
	kvs, err := x.all(ctx, r.Key, r.RangeEnd)
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		if err := x.notDuplicate(kv.Key, false); err != nil {
			return nil, err
		}
		if err := x.bufDelete(ctx, dataKey(kv.Key)); err != nil {
			return nil, err
		}
		x.wrote(dataKey(kv.Key))
		if kv.Lease != 0 {
			if err := x.bufDelete(ctx, indexKey(kv.Lease, kv.Key)); err != nil {
				return nil, err
			}
		}
	}
	s, e := dataSpan(r.Key, r.RangeEnd)
	x.deleted = append(x.deleted, [2][]byte{s, e})
	resp := &pb.DeleteRangeResponse{Deleted: int64(len(kvs))}
	if len(kvs) > 0 {
		x.writes++
	}
	if r.PrevKv {
		resp.PrevKvs = kvs
	}
	return resp, nil
}

// notDuplicate refuses, as etcd does, a Txn that puts a key twice or puts
// a key it deletes. (etcd checks every branch before running any; here
// the branch taken is checked as it runs.)
func (x *txnExec) notDuplicate(key []byte, isPut bool) error {
	if x.putKeys == nil {
		return nil // not inside a Txn
	}
	dk := dataKey(key)
	if _, ok := x.putKeys[string(key)]; ok {
		return rpctypes.ErrGRPCDuplicateKey
	}
	if isPut {
		for _, d := range x.deleted {
			if bytes.Compare(dk, d[0]) >= 0 && bytes.Compare(dk, d[1]) < 0 {
				return rpctypes.ErrGRPCDuplicateKey
			}
		}
		x.putKeys[string(key)] = struct{}{}
	}
	return nil
}

func (x *txnExec) txnOp(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if x.putKeys == nil {
		x.putKeys = map[string]struct{}{}
	}
	ok := true
	for _, c := range r.Compare {
		m, err := x.compare(ctx, c)
		if err != nil {
			return nil, err
		}
		if !m {
			ok = false
			break
		}
	}
	ops := r.Success
	if !ok {
		ops = r.Failure
	}
	resp := &pb.TxnResponse{Succeeded: ok, Responses: make([]*pb.ResponseOp, 0, len(ops))}
	for _, op := range ops {
		h := &pb.ResponseHeader{}
		x.headers = append(x.headers, h)
		switch v := op.Request.(type) {
		case *pb.RequestOp_RequestRange:
			rr, err := x.rangeOp(ctx, v.RequestRange)
			if err != nil {
				return nil, err
			}
			rr.Header = h
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}})
		case *pb.RequestOp_RequestPut:
			pr, err := x.put(ctx, v.RequestPut)
			if err != nil {
				return nil, err
			}
			pr.Header = h
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: pr}})
		case *pb.RequestOp_RequestDeleteRange:
			dr, err := x.deleteRange(ctx, v.RequestDeleteRange)
			if err != nil {
				return nil, err
			}
			dr.Header = h
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}})
		case *pb.RequestOp_RequestTxn:
			tr, err := x.txnOp(ctx, v.RequestTxn)
			if err != nil {
				return nil, err
			}
			tr.Header = h
			resp.Responses = append(resp.Responses, &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: tr}})
		default:
			return nil, status.Errorf(codes.InvalidArgument, "etcdapi: txn operation of unknown type %T", op.Request)
		}
	}
	return resp, nil
}

// compare evaluates one compare of a Txn as etcd does: over every key of
// its range; a missing key has version, revisions and lease 0, and a
// value compare with no key fails.
func (x *txnExec) compare(ctx context.Context, c *pb.Compare) (bool, error) {
	if err := checkKey(c.Key); err != nil {
		return false, err
	}
	kvs, err := x.all(ctx, c.Key, c.RangeEnd)
	if err != nil {
		return false, err
	}
	if len(kvs) == 0 {
		if c.Target == pb.Compare_VALUE {
			return false, nil
		}
		return x.compareKV(c, &mvccpb.KeyValue{}), nil
	}
	for _, kv := range kvs {
		if !x.compareKV(c, kv) {
			return false, nil
		}
	}
	return true, nil
}

func (x *txnExec) compareKV(c *pb.Compare, kv *mvccpb.KeyValue) bool {
	var r int
	cmpInt := func(a, b int64) int {
		switch {
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	}
	switch c.Target {
	case pb.Compare_VALUE:
		r = bytes.Compare(kv.Value, c.GetValue())
	case pb.Compare_CREATE:
		r = cmpInt(x.rev(kv, kv.CreateRevision), c.GetCreateRevision())
	case pb.Compare_MOD:
		r = cmpInt(x.rev(kv, kv.ModRevision), c.GetModRevision())
	case pb.Compare_VERSION:
		r = cmpInt(kv.Version, c.GetVersion())
	case pb.Compare_LEASE:
		r = cmpInt(kv.Lease, c.GetLease())
	default:
		return false
	}
	switch c.Result {
	case pb.Compare_EQUAL:
		return r == 0
	case pb.Compare_GREATER:
		return r > 0
	case pb.Compare_LESS:
		return r < 0
	case pb.Compare_NOT_EQUAL:
		return r != 0
	}
	return false
}
