package client

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/txnstatus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// fakeCluster is an in-process stand-in for a Canopy cluster: N gRPC
// servers on loopback sharing one in-memory store under one mutex. It
// implements the wire contract of canopy.proto closely enough for the
// client: range descriptors, leaseholders and their errors, MVCC reads
// and intents with the conflict rules of internal/mvcc, plain keys, the
// oracle. There is no Raft: a node "has" a replica if the descriptor lists
// it, and the leaseholder map says who serves.
//
// Simplification: a batch that fails part-way keeps the writes before the
// failing request (the client sends conflicting writes one per batch).
//
// Pipelining: a batch with async_consensus (PutIntents only) is evaluated
// like any other; a write that "fails to replicate" (dropAsync says so) is
// answered as written but leaves the key as it was, so that a later
// QueryIntent does not find it.
type fakeCluster struct {
	t   testing.TB
	enc txnstatus.Encoding

	mu struct {
		sync.Mutex
		ranges      []*rpcpb.RangeDescriptor // sorted by start key
		nextRangeID uint64
		leaseholder map[uint64]uint64 // range ID -> node ID
		hideHints   bool              // NOT_LEASEHOLDER without a hint
		versions    map[string][]fakeVersion
		intents     map[string]fakeIntent
		plain       map[string][]byte
		// refused: key -> start timestamps a RecoverIntent refused there.
		refused map[string]map[uint64]bool
		// onePC: start_ts -> commit_ts of applied CommitOnePCs (the 1PC
		// records, without their bound).
		onePC    map[uint64]uint64
		clock    uint64
		settings *rpcpb.ClusterSettings

		// counters
		tsCounts []uint32                // count of each Timestamps RPC
		batches  map[uint64]int          // per node
		errs     map[rpcpb.ErrorCode]int // errors returned by Batch and Timestamps
		reqs     map[string]int          // requests evaluated, by type name
		lookups  int                     // RangeLookup RPCs

		// hooks, called without mu held.
		beforeBatch func(node uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse
		afterBatch  func(node uint64, req *rpcpb.BatchRequest, resp *rpcpb.BatchResponse) *rpcpb.BatchResponse
		tsGate      chan struct{} // Timestamps waits until it is closed
		// dropAsync, if set, says which pipelined writes fail to
		// replicate (called with mu held).
		dropAsync func(key []byte) bool
		// asyncBatches counts batches sent with async_consensus.
		asyncBatches int
		// feedRefusal, if set, is the gRPC error every RangeFeed stream
		// ends with (fakeFeed); else RangeFeed is unimplemented, unless
		// feedServeAfter > 0: from that stream on (counting from 1) a
		// stream sends one checkpoint at from_ts+1 and stays open.
		feedRefusal    error
		feedServeAfter int
		feedStreams    int
	}
	tsEntered chan struct{} // receives one value per Timestamps RPC entering the gate
	nodes     []*fakeNode
}

type fakeVersion struct {
	ts    uint64
	value []byte
	del   bool
}

type fakeIntent struct {
	txn   *rpcpb.TxnMeta
	value []byte
	del   bool
}

type fakeNode struct {
	rpcpb.UnimplementedKVServer
	c    *fakeCluster
	id   uint64
	addr string
	srv  *grpc.Server
	// frozen: while set, the node answers nothing (freezeNode).
	frozen atomic.Pointer[chan struct{}]
	// frozenWaits counts the requests that found the node frozen.
	frozenWaits atomic.Int64
}

// fakeNow is the wall-clock time of every test client: heartbeat records
// are compared with it, so no test depends on the real clock.
var fakeNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newFakeCluster starts n nodes with the initial layout of keys.go: r1
// meta+oracle, r2 heartbeats, r3 status, r4 user keys; every node holds a
// replica of every range, node 1 leads all.
func newFakeCluster(t testing.TB, n int) *fakeCluster {
	enc, err := txnstatus.NewTickets(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := &fakeCluster{t: t, enc: enc, tsEntered: make(chan struct{}, 1000)}
	c.mu.leaseholder = map[uint64]uint64{}
	c.mu.versions = map[string][]fakeVersion{}
	c.mu.intents = map[string]fakeIntent{}
	c.mu.plain = map[string][]byte{}
	c.mu.batches = map[uint64]int{}
	c.mu.errs = map[rpcpb.ErrorCode]int{}
	c.mu.reqs = map[string]int{}
	c.mu.clock = 100
	c.mu.settings = &rpcpb.ClusterSettings{ClusterId: "fake", StatusEncoding: "tickets", ReplicationFactor: uint32(n)}
	var reps []*rpcpb.ReplicaDescriptor
	for i := 1; i <= n; i++ {
		reps = append(reps, &rpcpb.ReplicaDescriptor{NodeId: uint64(i)})
	}
	bounds := [][]byte{keys.MinKey, keys.HeartbeatPrefix, keys.StatusPrefix, keys.UserPrefix, keys.MaxKey}
	for i := 0; i+1 < len(bounds); i++ {
		c.mu.nextRangeID++
		c.mu.ranges = append(c.mu.ranges, &rpcpb.RangeDescriptor{RangeId: c.mu.nextRangeID,
			StartKey: bounds[i], EndKey: bounds[i+1], Replicas: reps, Generation: 1})
		c.mu.leaseholder[c.mu.nextRangeID] = 1
	}
	for i := 1; i <= n; i++ {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nd := &fakeNode{c: c, id: uint64(i), addr: lis.Addr().String(), srv: grpc.NewServer(
			grpc.MaxRecvMsgSize(messageBytesMax), grpc.MaxSendMsgSize(messageBytesMax))}
		rpcpb.RegisterKVServer(nd.srv, nd)
		rpcpb.RegisterFeedServer(nd.srv, &fakeFeed{c: c})
		healthpb.RegisterHealthServer(nd.srv, &fakeHealth{n: nd})
		go nd.srv.Serve(lis)
		c.nodes = append(c.nodes, nd)
	}
	t.Cleanup(func() {
		c.mu.Lock()
		if c.mu.tsGate != nil {
			select {
			case <-c.mu.tsGate:
			default:
				close(c.mu.tsGate)
			}
		}
		c.mu.Unlock()
		for _, nd := range c.nodes {
			nd.srv.Stop()
		}
	})
	return c
}

func (c *fakeCluster) addrs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.addr)
	}
	return out
}

// testOptions are fast, deterministic client options for the fake.
func testOptions() Options {
	return Options{
		SendBackoffInitial: time.Millisecond, SendBackoffMax: 5 * time.Millisecond,
		TxnBackoffInitial: time.Millisecond, TxnBackoffMax: 5 * time.Millisecond,
		RPCTimeout:    10 * time.Second,
		Clock:         func() time.Time { return fakeNow },
		IntentWaitMax: 200 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// open opens a client on c; mod adjusts the test options.
func (c *fakeCluster) open(mod ...func(*Options)) *DB {
	c.t.Helper()
	o := testOptions()
	for _, f := range mod {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := Open(ctx, c.addrs(), WithOptions(o))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { db.Close() })
	return db
}

// ---------------------------------------------------------------- control

func (c *fakeCluster) setLeaseholder(rangeID, node uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.leaseholder[rangeID] = node
}

func (c *fakeCluster) setAllLeaseholders(node uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.mu.leaseholder {
		c.mu.leaseholder[id] = node
	}
}

func (c *fakeCluster) setHideHints(b bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.hideHints = b
}

func (c *fakeCluster) setBeforeBatch(f func(node uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.beforeBatch = f
}

// setDropAsync sets which pipelined writes fail to replicate.
func (c *fakeCluster) setDropAsync(f func(key []byte) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.dropAsync = f
}

func (c *fakeCluster) asyncBatchCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.asyncBatches
}

func (c *fakeCluster) setAfterBatch(f func(node uint64, req *rpcpb.BatchRequest, resp *rpcpb.BatchResponse) *rpcpb.BatchResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.afterBatch = f
}

// gateTimestamps makes Timestamps RPCs block until the returned func runs.
func (c *fakeCluster) gateTimestamps() (release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := make(chan struct{})
	c.mu.tsGate = g
	var once sync.Once
	return func() { once.Do(func() { close(g) }) }
}

func (c *fakeCluster) stopNode(id uint64) { c.nodes[id-1].srv.Stop() }

// freezeNode makes node id answer nothing, as a process stopped with
// SIGSTOP: every Batch and health check waits until its context ends (or
// thaw is called).
func (c *fakeCluster) freezeNode(id uint64) (thaw func()) {
	ch := make(chan struct{})
	c.nodes[id-1].frozen.Store(&ch)
	return func() {
		c.nodes[id-1].frozen.Store(nil)
		close(ch)
	}
}

// freezeAfterApply: the first batch that applies successfully and that
// match accepts makes its node answer nothing from then on (freezeNode)
// and every lease move to node 2; its own reply waits until release is
// called, and is then lost. release also thaws the node; call it once the
// call under test has returned. matched counts the batches match accepted
// that applied.
func (c *fakeCluster) freezeAfterApply(match func(node uint64, req *rpcpb.BatchRequest) bool) (matched *atomic.Int32, release func()) {
	matched = &atomic.Int32{}
	released := make(chan struct{})
	thawed := make(chan func(), 1)
	c.setAfterBatch(func(node uint64, req *rpcpb.BatchRequest, resp *rpcpb.BatchResponse) *rpcpb.BatchResponse {
		if resp.GetError() != nil || !match(node, req) || matched.Add(1) != 1 {
			return nil
		}
		thawed <- c.freezeNode(node)
		c.setAllLeaseholders(2)
		<-released
		return lostReply
	})
	return matched, func() {
		close(released)
		select {
		case thaw := <-thawed:
			thaw()
		default:
		}
	}
}

// waitFrozen blocks while node n is frozen, until ctx ends.
func (n *fakeNode) waitFrozen(ctx context.Context) error {
	if ch := n.frozen.Load(); ch != nil {
		n.frozenWaits.Add(1)
		select {
		case <-*ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// fakeHealth is the grpc.health.v1 service of a fake node.
type fakeHealth struct {
	healthpb.UnimplementedHealthServer
	n *fakeNode
}

func (h *fakeHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := h.n.waitFrozen(ctx); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// split splits the range containing k at k; it returns the new right range.
func (c *fakeCluster) split(k []byte) *rpcpb.RangeDescriptor {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.splitLocked(k)
}

func (c *fakeCluster) splitLocked(k []byte) *rpcpb.RangeDescriptor {
	i := c.rangeIndexLocked(k)
	d := c.mu.ranges[i]
	if bytes.Equal(d.StartKey, k) {
		c.t.Fatalf("fake: split at existing boundary %q", k)
	}
	c.mu.nextRangeID++
	left := &rpcpb.RangeDescriptor{RangeId: d.RangeId, StartKey: d.StartKey, EndKey: k, Replicas: d.Replicas, Generation: d.Generation + 1}
	right := &rpcpb.RangeDescriptor{RangeId: c.mu.nextRangeID, StartKey: k, EndKey: d.EndKey, Replicas: d.Replicas, Generation: 1}
	c.mu.leaseholder[right.RangeId] = c.mu.leaseholder[d.RangeId]
	c.mu.ranges = append(c.mu.ranges[:i], append([]*rpcpb.RangeDescriptor{left, right}, c.mu.ranges[i+1:]...)...)
	return right
}

func (c *fakeCluster) rangeIndexLocked(k []byte) int {
	for i, d := range c.mu.ranges {
		if keys.Contains(d.StartKey, d.EndKey, k) {
			return i
		}
	}
	c.t.Fatalf("fake: no range contains %q", k)
	return -1
}

func (c *fakeCluster) rangeOf(k []byte) *rpcpb.RangeDescriptor {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.ranges[c.rangeIndexLocked(k)]
}

// putVersion stores a committed version directly.
func (c *fakeCluster) putVersion(k []byte, ts uint64, v []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addVersionLocked(string(k), fakeVersion{ts: ts, value: v})
}

// putIntent stores an intent of the transaction started at start.
func (c *fakeCluster) putIntent(k []byte, start uint64, v []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.intents[string(k)] = fakeIntent{txn: &rpcpb.TxnMeta{StartTs: start, HeartbeatKey: keys.HeartbeatKey(start)}, value: v}
}

func (c *fakeCluster) setPlain(k, v []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.plain[string(k)] = v
}

func (c *fakeCluster) getPlain(k []byte) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.mu.plain[string(k)]
	return v, ok
}

func (c *fakeCluster) intentCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.intents)
}

func (c *fakeCluster) hasIntent(k []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.mu.intents[string(k)]
	return ok
}

// heartbeatRecords counts heartbeat records.
func (c *fakeCluster) heartbeatRecords() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k := range c.mu.plain {
		if bytes.HasPrefix([]byte(k), keys.HeartbeatPrefix) {
			n++
		}
	}
	return n
}

// status decodes the status record of start.
func (c *fakeCluster) status(start uint64) (found bool, commitTs uint64, aborted bool) {
	v, ok := c.getPlain(keys.StatusKey(c.enc.Key(start)))
	if !ok {
		return false, 0, false
	}
	commitTs, aborted, err := c.enc.DecodeValue(start, v)
	if err != nil {
		c.t.Fatalf("fake: status of %d: %v", start, err)
	}
	return true, commitTs, aborted
}

func (c *fakeCluster) errCount(code rpcpb.ErrorCode) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.errs[code]
}

func (c *fakeCluster) batchCount(node uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.batches[node]
}

func (c *fakeCluster) reqCount(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.reqs[name]
}

func (c *fakeCluster) tsCounts() []uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]uint32(nil), c.mu.tsCounts...)
}

// ---------------------------------------------------------------- RPCs

func (n *fakeNode) Batch(ctx context.Context, req *rpcpb.BatchRequest) (*rpcpb.BatchResponse, error) {
	if err := n.waitFrozen(ctx); err != nil {
		return nil, err
	}
	c := n.c
	c.mu.Lock()
	before, after := c.mu.beforeBatch, c.mu.afterBatch
	c.mu.Unlock()
	if before != nil {
		if r := before(n.id, req); r != nil {
			c.mu.Lock()
			c.mu.errs[r.GetError().GetCode()]++
			c.mu.Unlock()
			return r, nil
		}
	}
	c.mu.Lock()
	c.mu.batches[n.id]++
	resp := c.evalLocked(n.id, req)
	if resp.Error != nil {
		c.mu.errs[resp.Error.Code]++
	}
	c.mu.Unlock()
	if after != nil {
		if r := after(n.id, req, resp); r != nil {
			if r == lostReply {
				return nil, status.Error(codes.Unavailable, "fake: the reply was lost")
			}
			c.mu.Lock()
			c.mu.errs[r.GetError().GetCode()]++
			c.mu.Unlock()
			return r, nil
		}
	}
	return resp, nil
}

// lostReply, returned by an afterBatch hook, makes Batch fail in
// transport after evaluating the batch: the reply is lost.
var lostReply = &rpcpb.BatchResponse{}

func errResp(code rpcpb.ErrorCode, msg string) *rpcpb.BatchResponse {
	return &rpcpb.BatchResponse{Error: &rpcpb.Error{Code: code, Message: msg}}
}

func (c *fakeCluster) rangeByIDLocked(id uint64) *rpcpb.RangeDescriptor {
	for _, d := range c.mu.ranges {
		if d.RangeId == id {
			return d
		}
	}
	return nil
}

// leaseErrLocked returns the error a node that is not the leaseholder of d
// answers, or nil.
func (c *fakeCluster) leaseErrLocked(node uint64, d *rpcpb.RangeDescriptor) *rpcpb.Error {
	has := false
	for _, r := range d.Replicas {
		has = has || r.NodeId == node
	}
	if !has {
		return &rpcpb.Error{Code: rpcpb.ErrorCode_RANGE_NOT_FOUND}
	}
	if lh := c.mu.leaseholder[d.RangeId]; lh != node {
		e := &rpcpb.Error{Code: rpcpb.ErrorCode_NOT_LEASEHOLDER, Message: "fake: not leaseholder"}
		if !c.mu.hideHints {
			e.LeaseholderHint = lh
			e.LeaseholderAddress = c.nodes[lh-1].addr
		}
		return e
	}
	return nil
}

func (c *fakeCluster) evalLocked(node uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
	d := c.rangeByIDLocked(req.RangeId)
	if d == nil {
		return errResp(rpcpb.ErrorCode_RANGE_NOT_FOUND, "fake: no such range")
	}
	if e := c.leaseErrLocked(node, d); e != nil {
		return &rpcpb.BatchResponse{Error: e}
	}
	in := func(k []byte) bool { return keys.Contains(d.StartKey, d.EndKey, k) }
	for _, r := range req.Requests {
		ok := true
		switch v := r.Value.(type) {
		case *rpcpb.RequestUnion_Scan:
			ok = in(v.Scan.Start) && bytes.Compare(v.Scan.End, d.EndKey) <= 0
		case *rpcpb.RequestUnion_Refresh:
			for _, sp := range v.Refresh.Spans {
				ok = ok && in(sp.Start) && (len(sp.End) == 0 || bytes.Compare(sp.End, d.EndKey) <= 0)
			}
		default:
			ok = in(requestKey(r))
		}
		if !ok {
			return &rpcpb.BatchResponse{Error: &rpcpb.Error{Code: rpcpb.ErrorCode_RANGE_KEY_MISMATCH, Range: d, Message: "fake: key outside range"}}
		}
	}
	if req.AsyncConsensus {
		for _, r := range req.Requests {
			if r.GetPutIntent() == nil {
				return errResp(rpcpb.ErrorCode_INVALID_ARGUMENT, "fake: async_consensus for a request other than PutIntent")
			}
		}
		c.mu.asyncBatches++
	}
	out := &rpcpb.BatchResponse{}
	for _, r := range req.Requests {
		var prior fakeIntent
		var hadPrior bool
		if req.AsyncConsensus {
			prior, hadPrior = c.mu.intents[string(r.GetPutIntent().GetKey())]
		}
		resp, e := c.evalOneLocked(r)
		if e != nil {
			return &rpcpb.BatchResponse{Error: e}
		}
		if k := r.GetPutIntent().GetKey(); req.AsyncConsensus && c.mu.dropAsync != nil && c.mu.dropAsync(k) {
			// Evaluated and answered, but the proposal never applies.
			if hadPrior {
				c.mu.intents[string(k)] = prior
			} else {
				delete(c.mu.intents, string(k))
			}
		}
		out.Responses = append(out.Responses, resp)
	}
	return out
}

func (c *fakeCluster) addVersionLocked(k string, v fakeVersion) {
	vs := append(c.mu.versions[k], v)
	sort.Slice(vs, func(i, j int) bool { return vs[i].ts < vs[j].ts })
	c.mu.versions[k] = vs
}

// readLocked returns the newest version at or below ts (0: newest).
func (c *fakeCluster) readLocked(k string, ts uint64) (fakeVersion, bool) {
	vs := c.mu.versions[k]
	for i := len(vs) - 1; i >= 0; i-- {
		if ts == 0 || vs[i].ts <= ts {
			return vs[i], !vs[i].del
		}
	}
	return fakeVersion{}, false
}

func (c *fakeCluster) latestTsLocked(k string) uint64 {
	vs := c.mu.versions[k]
	if len(vs) == 0 {
		return 0
	}
	return vs[len(vs)-1].ts
}

func intentOf(k string, in fakeIntent) *rpcpb.Intent {
	return &rpcpb.Intent{Key: []byte(k), Txn: in.txn}
}

func (c *fakeCluster) evalOneLocked(r *rpcpb.RequestUnion) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	c.mu.reqs[typeName(r)]++
	switch v := r.Value.(type) {
	case *rpcpb.RequestUnion_Get:
		g := v.Get
		k := string(g.Key)
		if in, ok := c.mu.intents[k]; ok {
			if g.TxnStart != 0 && in.txn.StartTs == g.TxnStart {
				return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_Get{Get: &rpcpb.GetResponse{Found: !in.del, Value: in.value}}}, nil
			}
			if g.Ts == 0 || in.txn.StartTs <= g.Ts {
				return nil, &rpcpb.Error{Code: rpcpb.ErrorCode_INTENT_FOUND, Intents: []*rpcpb.Intent{intentOf(k, in)}}
			}
		}
		ver, found := c.readLocked(k, g.Ts)
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_Get{Get: &rpcpb.GetResponse{Found: found, Value: ver.value, Ts: ver.ts}}}, nil
	case *rpcpb.RequestUnion_Scan:
		s := v.Scan
		set := map[string]bool{}
		for k := range c.mu.versions {
			set[k] = true
		}
		for k := range c.mu.intents {
			set[k] = true
		}
		var ks []string
		for k := range set {
			if keys.Contains(s.Start, s.End, []byte(k)) {
				ks = append(ks, k)
			}
		}
		sort.Strings(ks)
		var intents []*rpcpb.Intent
		resp := &rpcpb.ScanResponse{}
		for _, k := range ks {
			if in, ok := c.mu.intents[k]; ok {
				if s.TxnStart != 0 && in.txn.StartTs == s.TxnStart {
					if !in.del {
						resp.Kvs = append(resp.Kvs, &rpcpb.KeyValue{Key: []byte(k), Value: in.value})
					}
					continue
				}
				if s.Ts == 0 || in.txn.StartTs <= s.Ts {
					intents = append(intents, intentOf(k, in))
					continue
				}
			}
			if ver, found := c.readLocked(k, s.Ts); found {
				resp.Kvs = append(resp.Kvs, &rpcpb.KeyValue{Key: []byte(k), Value: ver.value, Ts: ver.ts})
			}
		}
		if len(intents) > 0 {
			return nil, &rpcpb.Error{Code: rpcpb.ErrorCode_INTENT_FOUND, Intents: intents}
		}
		if s.Limit > 0 && len(resp.Kvs) > int(s.Limit) {
			resp.Kvs = resp.Kvs[:s.Limit]
		}
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_Scan{Scan: resp}}, nil
	case *rpcpb.RequestUnion_PutIntent:
		p := v.PutIntent
		k := string(p.Key)
		if c.mu.refused[k][p.Txn.StartTs] {
			return nil, &rpcpb.Error{Code: rpcpb.ErrorCode_WRITE_CONFLICT, Message: "fake: refused by recovery"}
		}
		if ts := c.latestTsLocked(k); ts > p.Txn.StartTs {
			return nil, &rpcpb.Error{Code: rpcpb.ErrorCode_WRITE_CONFLICT, ExistingTs: ts}
		}
		if in, ok := c.mu.intents[k]; ok && in.txn.StartTs != p.Txn.StartTs {
			return nil, &rpcpb.Error{Code: rpcpb.ErrorCode_WRITE_CONFLICT, Intents: []*rpcpb.Intent{intentOf(k, in)}}
		}
		c.mu.intents[k] = fakeIntent{txn: p.Txn, value: p.Value, del: p.Delete}
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_PutIntent{PutIntent: &rpcpb.PutIntentResponse{}}}, nil
	case *rpcpb.RequestUnion_ResolveIntent:
		p := v.ResolveIntent
		k := string(p.Key)
		if in, ok := c.mu.intents[k]; ok && in.txn.StartTs == p.TxnStart {
			if p.CommitTs != 0 {
				c.addVersionLocked(k, fakeVersion{ts: p.CommitTs, value: in.value, del: in.del})
			}
			delete(c.mu.intents, k)
		}
		if p.CommitTs == 0 {
			delete(c.mu.refused[k], p.TxnStart)
		}
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_ResolveIntent{ResolveIntent: &rpcpb.ResolveIntentResponse{}}}, nil
	case *rpcpb.RequestUnion_Put:
		p := v.Put
		k := string(p.Key)
		if in, ok := c.mu.intents[k]; ok {
			return nil, &rpcpb.Error{Code: rpcpb.ErrorCode_INTENT_FOUND, Intents: []*rpcpb.Intent{intentOf(k, in)}}
		}
		c.mu.clock++
		c.addVersionLocked(k, fakeVersion{ts: c.mu.clock, value: p.Value, del: p.Delete})
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_Put{Put: &rpcpb.PutResponse{Ts: c.mu.clock}}}, nil
	case *rpcpb.RequestUnion_Refresh:
		p := v.Refresh
		var intents []*rpcpb.Intent
		for _, sp := range p.Spans {
			match := func(k string) bool {
				if len(sp.End) == 0 {
					return k == string(sp.Start)
				}
				return keys.Contains(sp.Start, sp.End, []byte(k))
			}
			for k, vs := range c.mu.versions {
				if !match(k) {
					continue
				}
				for _, ver := range vs {
					if ver.ts > p.FromTs && ver.ts <= p.ToTs {
						return nil, &rpcpb.Error{Code: rpcpb.ErrorCode_READ_CONFLICT, ExistingTs: ver.ts, Message: "fake: version in refresh window"}
					}
				}
			}
			for k, in := range c.mu.intents {
				if match(k) && in.txn.StartTs != p.TxnStart {
					intents = append(intents, intentOf(k, in))
				}
			}
		}
		if len(intents) > 0 {
			return nil, &rpcpb.Error{Code: rpcpb.ErrorCode_READ_CONFLICT, Intents: intents, Message: "fake: intents in refresh spans"}
		}
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_Refresh{Refresh: &rpcpb.RefreshResponse{}}}, nil
	case *rpcpb.RequestUnion_QueryIntent:
		q := v.QueryIntent
		in, ok := c.mu.intents[string(q.Key)]
		found := ok && in.txn.StartTs == q.TxnStart && rpcpb.IntentValueHash(in.value, in.del) == q.ValueHash
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_QueryIntent{QueryIntent: &rpcpb.QueryIntentResponse{Found: found}}}, nil
	case *rpcpb.RequestUnion_CommitOnePc:
		p := v.CommitOnePc
		if ct, ok := c.mu.onePC[p.TxnStart]; ok {
			return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_CommitOnePc{CommitOnePc: &rpcpb.CommitOnePCResponse{CommitTs: ct}}}, nil
		}
		if c.mu.refused[string(p.Writes[0].Key)][p.TxnStart] {
			return nil, &rpcpb.Error{Code: rpcpb.ErrorCode_WRITE_CONFLICT, Message: "fake: 1PC refused"}
		}
		for _, w := range p.Writes {
			k := string(w.Key)
			if in, ok := c.mu.intents[k]; ok {
				return nil, &rpcpb.Error{Code: rpcpb.ErrorCode_WRITE_CONFLICT, Intents: []*rpcpb.Intent{intentOf(k, in)}}
			}
			if ts := c.latestTsLocked(k); ts > p.TxnStart {
				return nil, &rpcpb.Error{Code: rpcpb.ErrorCode_WRITE_CONFLICT, ExistingTs: ts}
			}
		}
		c.mu.clock++
		for _, w := range p.Writes {
			c.addVersionLocked(string(w.Key), fakeVersion{ts: c.mu.clock, value: w.Value, del: w.Delete})
		}
		if c.mu.onePC == nil {
			c.mu.onePC = map[uint64]uint64{}
		}
		c.mu.onePC[p.TxnStart] = c.mu.clock
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_CommitOnePc{CommitOnePc: &rpcpb.CommitOnePCResponse{CommitTs: c.mu.clock}}}, nil
	case *rpcpb.RequestUnion_QueryOnePc:
		q := v.QueryOnePc
		out := &rpcpb.QueryOnePCResponse{}
		if ct, ok := c.mu.onePC[q.TxnStart]; ok {
			out.Committed, out.CommitTs = true, ct
		} else if c.latestTsLocked(string(q.Key)) <= q.TxnStart {
			if c.mu.refused == nil {
				c.mu.refused = map[string]map[uint64]bool{}
			}
			if c.mu.refused[string(q.Key)] == nil {
				c.mu.refused[string(q.Key)] = map[uint64]bool{}
			}
			c.mu.refused[string(q.Key)][q.TxnStart] = true
			out.Prevented = true
		}
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_QueryOnePc{QueryOnePc: out}}, nil
	case *rpcpb.RequestUnion_RecoverIntent:
		q := v.RecoverIntent
		k := string(q.Key)
		in, ok := c.mu.intents[k]
		found := ok && in.txn.StartTs == q.TxnStart && rpcpb.IntentValueHash(in.value, in.del) == q.ValueHash
		if !found {
			if c.mu.refused == nil {
				c.mu.refused = map[string]map[uint64]bool{}
			}
			if c.mu.refused[k] == nil {
				c.mu.refused[k] = map[uint64]bool{}
			}
			c.mu.refused[k][q.TxnStart] = true
		}
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_RecoverIntent{RecoverIntent: &rpcpb.RecoverIntentResponse{Found: found}}}, nil
	case *rpcpb.RequestUnion_PlainGet:
		val, ok := c.mu.plain[string(v.PlainGet.Key)]
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_PlainGet{PlainGet: &rpcpb.PlainGetResponse{Found: ok, Value: val}}}, nil
	case *rpcpb.RequestUnion_PlainPutUnlessExists:
		p := v.PlainPutUnlessExists
		if ex, ok := c.mu.plain[string(p.Key)]; ok {
			return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_PlainPutUnlessExists{PlainPutUnlessExists: &rpcpb.PlainPutUnlessExistsResponse{Existing: ex}}}, nil
		}
		c.mu.plain[string(p.Key)] = append([]byte{}, p.Value...)
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_PlainPutUnlessExists{PlainPutUnlessExists: &rpcpb.PlainPutUnlessExistsResponse{Succeeded: true}}}, nil
	case *rpcpb.RequestUnion_PlainPut:
		p := v.PlainPut
		if p.Delete {
			delete(c.mu.plain, string(p.Key))
		} else {
			c.mu.plain[string(p.Key)] = append([]byte{}, p.Value...)
		}
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_PlainPut{PlainPut: &rpcpb.PlainPutResponse{}}}, nil
	}
	return nil, &rpcpb.Error{Code: rpcpb.ErrorCode_INVALID_ARGUMENT, Message: "fake: unknown request"}
}

func typeName(r *rpcpb.RequestUnion) string {
	switch r.Value.(type) {
	case *rpcpb.RequestUnion_Get:
		return "Get"
	case *rpcpb.RequestUnion_Scan:
		return "Scan"
	case *rpcpb.RequestUnion_PutIntent:
		return "PutIntent"
	case *rpcpb.RequestUnion_ResolveIntent:
		return "ResolveIntent"
	case *rpcpb.RequestUnion_Put:
		return "Put"
	case *rpcpb.RequestUnion_Refresh:
		return "Refresh"
	case *rpcpb.RequestUnion_PlainGet:
		return "PlainGet"
	case *rpcpb.RequestUnion_PlainPutUnlessExists:
		return "PlainPutUnlessExists"
	case *rpcpb.RequestUnion_PlainPut:
		return "PlainPut"
	case *rpcpb.RequestUnion_QueryIntent:
		return "QueryIntent"
	case *rpcpb.RequestUnion_RecoverIntent:
		return "RecoverIntent"
	case *rpcpb.RequestUnion_CommitOnePc:
		return "CommitOnePC"
	case *rpcpb.RequestUnion_QueryOnePc:
		return "QueryOnePC"
	}
	return "?"
}

func (n *fakeNode) RangeLookup(ctx context.Context, req *rpcpb.RangeLookupRequest) (*rpcpb.RangeLookupResponse, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.lookups++
	d := c.mu.ranges[c.rangeIndexLocked(req.Key)]
	lh := c.mu.leaseholder[d.RangeId]
	if c.mu.hideHints {
		lh = 0
	}
	return &rpcpb.RangeLookupResponse{Range: d, LeaseholderNodeId: lh, Nodes: c.nodeDescsLocked()}, nil
}

func (c *fakeCluster) nodeDescsLocked() []*rpcpb.NodeDescriptor {
	var out []*rpcpb.NodeDescriptor
	for _, nd := range c.nodes {
		out = append(out, &rpcpb.NodeDescriptor{NodeId: nd.id, Address: nd.addr})
	}
	return out
}

func (n *fakeNode) Timestamps(ctx context.Context, req *rpcpb.TimestampRequest) (*rpcpb.TimestampResponse, error) {
	c := n.c
	c.mu.Lock()
	gate := c.mu.tsGate
	c.mu.Unlock()
	if gate != nil {
		c.tsEntered <- struct{}{}
		<-gate
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.mu.ranges[c.rangeIndexLocked(keys.OracleBoundKey)]
	if e := c.leaseErrLocked(n.id, d); e != nil {
		c.mu.errs[e.Code]++
		return &rpcpb.TimestampResponse{Error: e}, nil
	}
	c.mu.tsCounts = append(c.mu.tsCounts, req.Count)
	first := c.mu.clock + 1
	c.mu.clock += uint64(req.Count)
	return &rpcpb.TimestampResponse{First: first, Count: req.Count}, nil
}

func (n *fakeNode) ClusterInfo(ctx context.Context, req *rpcpb.ClusterInfoRequest) (*rpcpb.ClusterInfoResponse, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return &rpcpb.ClusterInfoResponse{Settings: c.mu.settings, Nodes: c.nodeDescsLocked()}, nil
}

func (n *fakeNode) Split(ctx context.Context, req *rpcpb.SplitRequest) (*rpcpb.SplitResponse, error) {
	c := n.c
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.mu.ranges[c.rangeIndexLocked(req.SplitKey)]
	if e := c.leaseErrLocked(n.id, d); e != nil {
		return &rpcpb.SplitResponse{Error: e}, nil
	}
	right := c.splitLocked(req.SplitKey)
	return &rpcpb.SplitResponse{Left: c.mu.ranges[c.rangeIndexLocked(d.StartKey)], Right: right}, nil
}

func (n *fakeNode) NodeStatus(ctx context.Context, req *rpcpb.NodeStatusRequest) (*rpcpb.NodeStatusResponse, error) {
	return &rpcpb.NodeStatusResponse{NodeId: n.id, Address: n.addr, Bootstrapped: true}, nil
}

// fakeFeed is the Feed service of a fakeNode: it serves no rangefeed; a
// stream ends with the cluster's feedRefusal (as the node's authorization
// interceptor refuses a stream), or Unimplemented.
type fakeFeed struct {
	rpcpb.UnimplementedFeedServer
	c *fakeCluster
}

func (f *fakeFeed) RangeFeed(req *rpcpb.RangeFeedRequest, st rpcpb.Feed_RangeFeedServer) error {
	f.c.mu.Lock()
	err := f.c.mu.feedRefusal
	f.c.mu.feedStreams++
	serve := f.c.mu.feedServeAfter > 0 && f.c.mu.feedStreams >= f.c.mu.feedServeAfter
	f.c.mu.Unlock()
	if err != nil {
		return err
	}
	if serve {
		if err := st.Send(&rpcpb.RangeFeedEvent{Checkpoint: &rpcpb.FeedCheckpoint{ResolvedTs: req.GetFromTs() + 1}}); err != nil {
			return err
		}
		<-st.Context().Done()
		return nil
	}
	return f.UnimplementedFeedServer.RangeFeed(req, st)
}
