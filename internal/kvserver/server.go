package kvserver

import (
	"context"
	"errors"
	"github.com/canopy-db/canopy/internal/buildinfo"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/canopy-db/canopy/internal/commitprotocol"
	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/eval"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"google.golang.org/protobuf/proto"
)

type kvService struct {
	rpcpb.UnimplementedKVServer
	n *Node
}

type internalService struct {
	rpcpb.UnimplementedInternalServer
	n *Node
}

// Batch implements rpcpb.KVServer.
func (s *kvService) Batch(ctx context.Context, req *rpcpb.BatchRequest) (*rpcpb.BatchResponse, error) {
	start := time.Now()
	resp := s.n.batch(ctx, req)
	if e := resp.Error; e != nil && e.Code == rpcpb.ErrorCode_NOT_LEASEHOLDER && e.LeaseholderHint != 0 &&
		e.LeaseholderHint != s.n.NodeID() && wantsProxy(ctx) {
		resp = s.n.proxyBatch(ctx, req, e.LeaseholderHint) // proxy.go
	}
	s.n.observeBatch(req, resp, start) // metrics.go
	return resp, nil
}

func (n *Node) batch(ctx context.Context, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
	fail := func(e *rpcpb.Error) *rpcpb.BatchResponse { return &rpcpb.BatchResponse{Error: e} }
	if !n.bootstrapped() {
		return fail(pbErr(rpcpb.ErrorCode_NOT_BOOTSTRAPPED, "node is not part of a cluster yet: run canopy init"))
	}
	if e := validateBatch(req); e != nil {
		return fail(e)
	}
	if e := n.admitBatch(req); e != nil { // protocol.go
		return fail(e)
	}
	rr := n.replica(req.RangeId)
	if rr == nil || rr.sm.Desc() == nil {
		return fail(pbErr(rpcpb.ErrorCode_RANGE_NOT_FOUND, "node n%d has no replica of range r%d", n.NodeID(), req.RangeId))
	}
	if rr.damaged.Load() {
		return fail(n.damagedErr(rr)) // damage.go
	}
	if !rr.r.Status().IsLeader {
		return fail(n.notLeaseholder(rr))
	}
	n.recordLoad(rr, req) // loadsplit.go
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	var resp *rpcpb.BatchResponse
	if req.Requests[0].IsWrite() {
		if e := n.disk.refuseWrite(req, req.RangeId, n.NodeID()); e != nil { // diskspace.go
			return fail(e)
		}
		if isPrepare(req) { // twopc_path.go
			resp = n.withIntentWaits(ctx, rr, req, concurrency.Exclusive, n.prepareOnce)
		} else if hasPut(req) && n.commitProtocol() == commitprotocol.TwoPCLocking {
			resp = n.withIntentWaits(ctx, rr, req, concurrency.Exclusive, n.putOnceTwoPC) // twopc_path.go
		} else {
			resp = n.withIntentWaits(ctx, rr, req, concurrency.Exclusive, n.writeOnce)
		}
	} else if isLockingRead(req) { // twopc_path.go
		resp = n.withIntentWaits(ctx, rr, req, concurrency.Shared, n.lockingReadOnce)
	} else {
		resp = n.withIntentWaits(ctx, rr, req, concurrency.Shared, n.readOnce)
	}
	if e := resp.Error; e != nil && e.Code == rpcpb.ErrorCode_INTERNAL && rr.damaged.Load() &&
		(!req.Requests[0].IsWrite() || strings.Contains(e.Message, "corruption")) {
		// The evaluation met the damage: a read of a damaged value, which
		// fails a write's evaluation before anything is proposed. Another
		// replica answers instead.
		return fail(n.damagedErr(rr))
	}
	return resp
}

// validateBatch enforces the limits of keys.go and batch homogeneity.
func validateBatch(req *rpcpb.BatchRequest) *rpcpb.Error {
	if len(req.Requests) == 0 {
		return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "empty batch")
	}
	if len(req.Requests) > keys.TxnKeysMax {
		return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "batch of %d requests exceeds TxnKeysMax (%d)", len(req.Requests), keys.TxnKeysMax)
	}
	if size := proto.Size(req); size > keys.RequestBytesMax {
		return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "request of %d bytes exceeds RequestBytesMax (%d bytes)", size, keys.RequestBytesMax)
	}
	if req.AsyncConsensus {
		for _, ru := range req.Requests {
			if ru.GetPutIntent() == nil {
				return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "async_consensus is for batches of PutIntent only, not %s", ru.Method())
			}
		}
	}
	if e := validateTwoPC(req); e != nil { // twopc_path.go
		return e
	}
	w := req.Requests[0].IsWrite()
	keyMax := keys.KeyBytesMax + 64 // user keys plus the prefixes of system keys
	putKeys := map[string]struct{}{}
	for _, ru := range req.Requests {
		if ru.Value == nil {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "empty request in batch")
		}
		if ru.IsWrite() != w {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "a batch must be all reads or all writes")
		}
		switch r := ru.Value.(type) {
		case *rpcpb.RequestUnion_PutIntent:
			if r.PutIntent.Txn.GetStartTs() == 0 {
				return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "PutIntent without a transaction start timestamp")
			}
		case *rpcpb.RequestUnion_Put:
			// Every Put of a batch takes the batch's one write timestamp,
			// so two of them on one key would conflict with each other.
			if _, dup := putKeys[string(r.Put.Key)]; dup {
				return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "key %q is written twice in one batch", r.Put.Key)
			}
			putKeys[string(r.Put.Key)] = struct{}{}
		case *rpcpb.RequestUnion_Refresh:
			for _, sp := range r.Refresh.Spans {
				if len(sp.Start) > keyMax {
					return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "key of %d bytes exceeds KeyBytesMax (%d bytes)", len(sp.Start), keys.KeyBytesMax)
				}
			}
			continue
		}
		key, value := ru.Key(), ru.WrittenValue()
		if len(key) == 0 {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "empty key")
		}
		if eval.WritesStatusScheduleKey(ru) {
			// Versions are immutable: only the next one is added, by
			// put-unless-exists (eval/status_schedule.go).
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "%s on status encoding schedule key %x: the schedule is written only by PlainPutUnlessExists of its next version; existing versions may not be altered or removed", ru.Method(), key)
		}
		switch ru.Value.(type) {
		case *rpcpb.RequestUnion_PlainGet, *rpcpb.RequestUnion_PlainPut, *rpcpb.RequestUnion_PlainPutUnlessExists:
			// A user key's plain slot holds its key record (1PC records,
			// refusals): only the protocol's own requests may touch it.
			if keys.IsUser(key) {
				return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "%s on user key %q: plain requests are for system keys only", ru.Method(), key)
			}
		}
		if len(key) > keyMax {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "key of %d bytes exceeds KeyBytesMax (%d bytes)", len(key), keys.KeyBytesMax)
		}
		if len(value) > keys.ValueBytesMax {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "value of %d bytes exceeds ValueBytesMax (%d bytes)", len(value), keys.ValueBytesMax)
		}
	}
	return nil
}

// read evaluates a batch of reads on an engine snapshot current with the
// range's log. A leaseholder whose lease is valid (replica.leaderLease)
// serves from its applied state at once; otherwise ReadIndex confirms
// leadership with a quorum and waits for the log to apply. Then read
// latches wait for the writes in flight on the same keys (held only until
// the snapshot is open), and the batch evaluates on the snapshot.
func (n *Node) readOnce(ctx context.Context, rr *rangeReplica, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
	fail := func(e *rpcpb.Error) *rpcpb.BatchResponse { return &rpcpb.BatchResponse{Error: e} }
	var snap *storage.Snapshot
	e := n.leaseRead(ctx, rr, func(replica.Status) (func(), *rpcpb.Error) {
		g, err := rr.latches.Acquire(ctx, eval.Declare(req, rr.sm.Desc()))
		if err != nil {
			return nil, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "waiting for latches: %v", err)
		}
		// Under the read latches: a hierarchy part that writes these keys
		// either validated before this (its intent is in place and the
		// read waits for it) or takes a timestamp above the read's
		// (hierarchy_part.go, Observe).
		n.raiseReadFloor(req)
		snap = n.eng.NewSnapshot()
		rr.latches.Release(g)
		return func() { snap.Close() }, nil
	})
	if e != nil {
		return fail(e)
	}
	defer snap.Close()
	gcThreshold, err := rr.sm.gcThreshold()
	if err != nil {
		return fail(pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err))
	}
	return eval.EvalRead(eval.Context{Desc: rr.sm.Desc(), GCThreshold: gcThreshold}, snap, req)
}

// leaseRead takes a read of rr's state (take) that is current for the
// range. It is confirmed by rr's lease when the lease is valid (on the
// replica's clock, on which it computed the lease's expiry) before take
// and still valid, in the same term, after it: then no other leader
// existed when the read was taken. Otherwise take runs after a ReadIndex
// round. take gets the replica's status as of the confirmation; if the
// lease lapsed during take, the undo take returned (nil: nothing to give
// back) releases what it holds, and take runs again after a ReadIndex
// round. Reads, locking reads and range lookups share it.
func (n *Node) leaseRead(ctx context.Context, rr *rangeReplica, take func(st replica.Status) (undo func(), e *rpcpb.Error)) *rpcpb.Error {
	st := rr.r.Status()
	byLease := st.LeaseValid(rr.r.Now())
	for {
		if !byLease {
			if err := rr.r.ReadIndex(ctx); err != nil {
				return n.proposeErr(rr, err)
			}
			st = rr.r.Status()
		}
		undo, e := take(st)
		if e != nil {
			return e
		}
		if !byLease || rr.r.ReadByLease(st.Term) {
			return nil
		}
		if undo != nil {
			undo()
		}
		byLease = false
	}
}

// write evaluates a batch of writes at the leaseholder under write latches
// and proposes its effect: the engine batch that evaluation produced. The
// latches are held until the command has applied here (or is known never
// to apply), even if the client stops waiting: a later request on the same
// keys then evaluates on a state that includes it.
func (n *Node) writeOnce(ctx context.Context, rr *rangeReplica, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
	return n.writeOnceChecked(ctx, rr, req, nil)
}

// writeOnceChecked is writeOnce, with check (if not nil) asked under the
// latches, before evaluation: an error it returns is the response.
func (n *Node) writeOnceChecked(ctx context.Context, rr *rangeReplica, req *rpcpb.BatchRequest, check func(*concurrency.LockTable) *rpcpb.Error) *rpcpb.BatchResponse {
	fail := func(e *rpcpb.Error) *rpcpb.BatchResponse { return &rpcpb.BatchResponse{Error: e} }
	if err := rr.r.WaitLeaseholder(ctx); err != nil {
		return fail(n.proposeErr(rr, err))
	}
	// The term of a status that says Leaseholder: the state is current for
	// that term. (If the term has moved on since, the proposal is refused.)
	st := rr.r.Status()
	if !st.Leaseholder {
		return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "range r%d: leadership changed while the request waited for it", rr.r.RangeID()))
	}
	term := st.Term
	locks := rr.lockTable(term)
	g, err := rr.latches.Acquire(ctx, eval.Declare(req, rr.sm.Desc()))
	if err != nil {
		return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "waiting for latches: %v", err))
	}
	return n.writeLatched(ctx, rr, req, term, locks, check, g)
}

// writeLatched is writeOnce once the latches gs (together covering req's
// spans) are held, in Raft term term. It owns gs: it releases them when
// the command has applied here or is known never to apply (the
// hierarchy's part writes take their latches before they validate, and a
// round's parts share one command: hierarchy_part.go).
func (n *Node) writeLatched(ctx context.Context, rr *rangeReplica, req *rpcpb.BatchRequest, term uint64, locks *concurrency.LockTable,
	check func(*concurrency.LockTable) *rpcpb.Error, gs ...*concurrency.LatchGuard) *rpcpb.BatchResponse {
	fail := func(e *rpcpb.Error) *rpcpb.BatchResponse { return &rpcpb.BatchResponse{Error: e} }
	release := func() {
		for _, g := range gs {
			rr.latches.Release(g)
		}
	}
	// Tracked from before its timestamp (and its evaluation) until it has
	// applied or never will: the range's closed timestamp stays below it
	// (feed.go).
	tok := n.trackWrite(rr)
	proposed := false
	defer func() {
		if !proposed {
			release()
			tok.Done()
		}
	}()
	if check != nil {
		if e := check(locks); e != nil {
			return fail(e)
		}
	}
	var writeTs uint64
	for _, ru := range req.Requests {
		if m := ru.Method(); m == rpcpb.MethodPut || m == rpcpb.MethodCommitOnePC {
			// The timestamp is taken after latching: see latchSet.
			ts, e := n.timestamp(ctx)
			if e != nil {
				return fail(e)
			}
			writeTs = ts
			break
		}
	}
	// The GC threshold bounds what evaluation may read (CommitOnePC's
	// refresh and its record pruning, QueryOnePC), as for reads.
	gcThreshold, gerr := rr.sm.gcThreshold()
	if gerr != nil {
		return fail(pbErr(rpcpb.ErrorCode_INTERNAL, "%v", gerr))
	}
	if e := checkAboveClosed(rr, writeTs); e != nil {
		return fail(e)
	}
	ec := eval.Context{Desc: rr.sm.Desc(), WriteTs: writeTs, GCThreshold: gcThreshold,
		SharedLocks: writeTs != 0 && n.commitProtocol() == commitprotocol.TwoPCLocking}
	if !ec.SharedLocks && onlyPuts(req) {
		ec.KeyStates = rr.sm.keys.at(term) // keystates.go
	}
	if eval.HasStatusScheduleWrite(req) {
		// After latching the schedule: a version's new eras must begin
		// above it (eval/status_schedule.go).
		ts, e := n.timestamp(ctx)
		if e != nil {
			return fail(e)
		}
		ec.ScheduleTs = ts
	}
	resp, fx, data, err := evaluateWrite(n.eng, term, ec, req)
	if err != nil {
		return fail(pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err))
	}
	if resp.Error != nil {
		return resp
	}
	if data == nil {
		// Nothing to replicate: writes that change nothing (resolving an
		// intent that is gone).
		applyLockEffects(locks, fx)
		return resp
	}
	proposed = true
	finished := func(res any, _ error) {
		if _, ok := res.(appliedResult); ok {
			applyLockEffects(locks, fx)
		}
		release()
		tok.Done() // after Flushed published its events (replica.FlushObserver)
	}
	if req.AsyncConsensus && rr.asyncProposals.TryAcquire() {
		// Pipelining: answer now; the proposal goes on without the client,
		// which proves the write (QueryIntent) before its commit point. The
		// latches stay held until the proposal is finished, so a proof waits
		// for it. Past AsyncProposalsMax in flight on the range the write
		// waits for its proposal like any other (back-pressure).
		go func() {
			defer rr.asyncProposals.Release()
			pctx, cancel := context.WithTimeout(n.stopCtx, n.cfg.RequestTimeout)
			defer cancel()
			_, _ = rr.r.ProposeEvaluated(pctx, data, term, finished)
		}()
		return resp
	}
	res, err := rr.r.ProposeEvaluated(ctx, data, term, finished)
	if err != nil {
		return fail(n.proposeErr(rr, err))
	}
	switch r := res.(type) {
	case appliedResult:
		return resp
	case *rpcpb.BatchResponse:
		return r
	}
	return fail(pbErr(rpcpb.ErrorCode_INTERNAL, "unexpected result %T", res))
}

// evaluateWrite evaluates a batch of writes on an indexed batch over eng,
// the leaseholder's state under c.Desc in Raft term term, and returns the
// response, the lock effects and the Raft command that carries the
// evaluation's effect to every replica: the engine batch's bytes, tagged
// with the term and the range generation, which apply checks
// (rangeSM.Apply). cmd is nil when the evaluation failed (resp.Error) or
// wrote nothing. The caller holds the batch's write latches.
func evaluateWrite(eng *storage.Engine, term uint64, c eval.Context, req *rpcpb.BatchRequest) (resp *rpcpb.BatchResponse, fx eval.Effects, cmd []byte, err error) {
	b := eng.NewBatch()
	defer b.Close()
	resp, fx = eval.EvalWrite(c, b, req)
	if resp.Error != nil || b.Empty() {
		return resp, fx, nil, nil
	}
	cmd, err = proto.Marshal(&rpcpb.RaftCommand{WriteBatch: b.Repr(), ProposerTerm: term, RangeGeneration: c.Desc.GetGeneration()})
	return resp, fx, cmd, err
}

func (n *Node) propose(ctx context.Context, rr *rangeReplica, cmd *rpcpb.RaftCommand) (any, *rpcpb.Error) {
	data, err := proto.Marshal(cmd)
	if err != nil {
		return nil, pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err)
	}
	res, err := rr.r.Propose(ctx, data)
	if err != nil {
		return nil, n.proposeErr(rr, err)
	}
	return res, nil
}

// RangeLookup implements rpcpb.KVServer.
func (s *kvService) RangeLookup(ctx context.Context, req *rpcpb.RangeLookupRequest) (*rpcpb.RangeLookupResponse, error) {
	n := s.n
	if !n.bootstrapped() {
		return &rpcpb.RangeLookupResponse{Error: pbErr(rpcpb.ErrorCode_NOT_BOOTSTRAPPED, "node is not part of a cluster yet: run canopy init")}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	d, e := n.lookupMeta(ctx, req.Key)
	if e != nil {
		return &rpcpb.RangeLookupResponse{Error: e}, nil
	}
	resp := &rpcpb.RangeLookupResponse{Range: d, Nodes: n.nodeList()}
	if rr := n.replica(d.RangeId); rr != nil {
		resp.LeaseholderNodeId = rr.r.Status().Leader
	}
	return resp, nil
}

// Timestamps implements rpcpb.KVServer.
func (s *kvService) Timestamps(ctx context.Context, req *rpcpb.TimestampRequest) (*rpcpb.TimestampResponse, error) {
	n := s.n
	if !n.bootstrapped() {
		return &rpcpb.TimestampResponse{Error: pbErr(rpcpb.ErrorCode_NOT_BOOTSTRAPPED, "node is not part of a cluster yet: run canopy init")}, nil
	}
	if req.Count == 0 || req.Count > OracleBatchMax {
		return &rpcpb.TimestampResponse{Error: pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "count %d is outside [1, %d] (OracleBatchMax)", req.Count, OracleBatchMax)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	first, e := n.allocateLocal(ctx, req.Count)
	if l := n.r1Leader(); e != nil && e.Code == rpcpb.ErrorCode_NOT_LEASEHOLDER && !fromNode(ctx) &&
		l != 0 && l != n.NodeID() && (!n.liveness.isLive(l) || wantsProxy(ctx)) {
		// A client's request at a node that is not the oracle host, while
		// the host range 1 last had is silent (stopped, cut off), or while
		// the client cannot reach the host itself (it asks with the
		// ProxyHeader, proxy.go: a cut between the client and the host
		// alone): fetch for the client rather than send it back with a
		// hint it cannot follow (fetchTimestamps moves on as soon as range
		// 1 elects a leader). Otherwise the hint goes back, so the client
		// talks to the oracle host directly. A node's request is never
		// forwarded again, so forwarding cannot loop.
		f, err := n.fetchTimestamps(int(req.Count))
		if err == nil {
			return &rpcpb.TimestampResponse{First: f, Count: req.Count}, nil
		}
		var pe *rpcpb.Error
		if errors.As(err, &pe) {
			e = pe
		} else {
			e = pbErr(rpcpb.ErrorCode_UNAVAILABLE, "oracle: %v", err)
		}
	}
	if e != nil {
		return &rpcpb.TimestampResponse{Error: e}, nil
	}
	return &rpcpb.TimestampResponse{First: first, Count: req.Count}, nil
}

// ClusterInfo implements rpcpb.KVServer.
func (s *kvService) ClusterInfo(ctx context.Context, _ *rpcpb.ClusterInfoRequest) (*rpcpb.ClusterInfoResponse, error) {
	if !s.n.bootstrapped() {
		return &rpcpb.ClusterInfoResponse{Error: pbErr(rpcpb.ErrorCode_NOT_BOOTSTRAPPED, "node is not part of a cluster yet: run canopy init")}, nil
	}
	return &rpcpb.ClusterInfoResponse{Settings: s.n.settings(), Nodes: s.n.nodeList(),
		ElectionTimeoutMs: uint32(s.n.electionTimeout().Milliseconds())}, nil
}

// NodeStatus implements rpcpb.KVServer.
func (s *kvService) NodeStatus(ctx context.Context, _ *rpcpb.NodeStatusRequest) (*rpcpb.NodeStatusResponse, error) {
	n := s.n
	resp := &rpcpb.NodeStatusResponse{NodeId: n.NodeID(), Address: n.Addr(), Bootstrapped: n.bootstrapped(),
		Version: buildinfo.Get().String(), StoreBytes: n.eng.DiskBytes(), StartedUnixNanos: n.started.UnixNano()}
	for _, rr := range n.replicaList() {
		st := rr.r.Status()
		rs := &rpcpb.RangeStatus{
			Range: rr.sm.Desc(), LeaderNodeId: st.Leader, RaftTerm: st.Term,
			RaftCommittedIndex: st.Commit, RaftAppliedIndex: st.Applied,
			ApproxBytes: n.rangeApproxBytes(rr),
		}
		if st.IsLeader {
			rs.Followers = followerProgress(rs.Range, rr.r.Progress())
		}
		resp.Ranges = append(resp.Ranges, rs)
	}
	return resp, nil
}

// Split implements rpcpb.KVServer.
func (s *kvService) Split(ctx context.Context, req *rpcpb.SplitRequest) (*rpcpb.SplitResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.n.cfg.RequestTimeout)
	defer cancel()
	return s.n.split(ctx, req.SplitKey), nil
}

// Bootstrap implements rpcpb.KVServer.
func (s *kvService) Bootstrap(ctx context.Context, req *rpcpb.BootstrapRequest) (*rpcpb.BootstrapResponse, error) {
	settings, e := s.n.bootstrap(ctx, req)
	return &rpcpb.BootstrapResponse{Error: e, Settings: settings}, nil
}

// Raft implements rpcpb.InternalServer.
func (s *internalService) Raft(ctx context.Context, req *rpcpb.RaftMessageBatch) (*rpcpb.RaftMessageBatchResponse, error) {
	// Snapshots come over this RPC one at a time, and its error is how a
	// refused snapshot reaches the sender's Raft leader (reported as a
	// failed snapshot, so that it tries again later).
	var first error
	for _, m := range req.Messages {
		if err := s.n.receiveRaft(m); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return nil, status.Error(codes.FailedPrecondition, first.Error())
	}
	return &rpcpb.RaftMessageBatchResponse{}, nil
}

// Propose implements rpcpb.InternalServer.
func (s *internalService) Propose(ctx context.Context, req *rpcpb.ProposeRequest) (*rpcpb.ProposeResponse, error) {
	n := s.n
	rr := n.replica(req.RangeId)
	if rr == nil {
		return &rpcpb.ProposeResponse{Error: pbErr(rpcpb.ErrorCode_RANGE_NOT_FOUND, "node n%d has no replica of range r%d", n.NodeID(), req.RangeId)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	res, e := n.propose(ctx, rr, req.Command)
	if e != nil {
		return &rpcpb.ProposeResponse{Error: e}, nil
	}
	switch r := res.(type) {
	case *rpcpb.BatchResponse:
		return &rpcpb.ProposeResponse{Error: r.Error}, nil
	case rangeIDResult:
		return &rpcpb.ProposeResponse{Value: uint64(r)}, nil
	case nodeIDResult:
		return &rpcpb.ProposeResponse{Value: uint64(r)}, nil
	}
	return &rpcpb.ProposeResponse{}, nil
}

// Join implements rpcpb.InternalServer.
func (s *internalService) Join(ctx context.Context, req *rpcpb.JoinRequest) (*rpcpb.JoinResponse, error) {
	return &rpcpb.JoinResponse{Error: s.n.join(req)}, nil
}

// Ping implements rpcpb.InternalServer.
func (s *internalService) Ping(ctx context.Context, _ *rpcpb.PingRequest) (*rpcpb.PingResponse, error) {
	return &rpcpb.PingResponse{NodeId: s.n.NodeID(), Bootstrapped: s.n.bootstrapped(), StoreId: s.n.storeID}, nil
}

// Status returns the node's status (as NodeStatus over RPC).
func (n *Node) Status(ctx context.Context) (*rpcpb.NodeStatusResponse, error) {
	return (&kvService{n: n}).NodeStatus(ctx, &rpcpb.NodeStatusRequest{})
}

// followerProgress describes a leader's view of its followers (canopy
// status: each follower's lag).
func followerProgress(d *rpcpb.RangeDescriptor, prs []replica.PeerProgress) []*rpcpb.FollowerProgress {
	out := make([]*rpcpb.FollowerProgress, 0, len(prs))
	for _, p := range prs {
		fp := &rpcpb.FollowerProgress{NodeId: replica.NodeOf(p.PeerID), ReplicaId: replica.ReplicaIDOf(p.PeerID),
			Match: p.Match, Lag: p.Lag, State: p.State, RecentActive: p.RecentActive}
		if rd := replicaOn(d, fp.NodeId); rd != nil {
			fp.Type = rd.Type
		} else if p.Learner {
			fp.Type = rpcpb.ReplicaType_LEARNER
		}
		out = append(out, fp)
	}
	return out
}

// onlyPuts reports whether every request of req is a non-transactional
// Put: the batches whose Puts may take their keys' state from the key
// cache (keystates.go), as no other write of the batch can hide an intent
// from it.
func onlyPuts(req *rpcpb.BatchRequest) bool {
	for _, ru := range req.Requests {
		if ru.Method() != rpcpb.MethodPut {
			return false
		}
	}
	return len(req.Requests) > 0
}
