package kvserver

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/canopy-db/canopy/internal/hierarchy"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// hierarchyService serves the Hierarchy gRPC service.
type hierarchyService struct {
	rpcpb.UnimplementedHierarchyServer
	n *Node
}

// Commit implements rpcpb.HierarchyServer: one part of a transaction.
func (s *hierarchyService) Commit(ctx context.Context, req *rpcpb.HierCommitRequest) (*rpcpb.HierCommitResponse, error) {
	n := s.n
	fail := func(e *rpcpb.Error) (*rpcpb.HierCommitResponse, error) {
		return &rpcpb.HierCommitResponse{Error: e}, nil
	}
	if !n.bootstrapped() {
		return fail(pbErr(rpcpb.ErrorCode_NOT_BOOTSTRAPPED, "node is not part of a cluster yet: run canopy init"))
	}
	rt := n.hier.Load()
	if rt == nil {
		if n.settings().GetHierarchy() == nil {
			return fail(pbErr(rpcpb.ErrorCode_PROTOCOL_NOT_RUN, "the cluster runs commit protocol %s, not a hierarchy protocol (chosen at canopy init)", n.commitProtocol()))
		}
		return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "node n%d: the hierarchy validators are starting", n.NodeID()))
	}
	if e := rt.validatePart(req); e != nil {
		return fail(e)
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	// Wait out the lease fences of the ranges touched (a range not led
	// here is refused by the leaf).
	for _, k := range partKeys(req) {
		rr := n.replicaForKey(k)
		if rr == nil {
			continue
		}
		for {
			d, led := rt.fenceWait(rr.r.RangeID())
			if !led || d == 0 {
				break
			}
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "range r%d: waiting for the hierarchy lease fence: %v", rr.r.RangeID(), ctx.Err()))
			case <-t.C:
			}
		}
	}
	txn := hierarchy.TxnID(req.StartTs)
	answer := req.Nodes[0] == rt.self
	var decided chan hierarchy.Decision
	if answer {
		decided = rt.addWaiter(txn)
		defer rt.removeWaiter(txn)
	}
	in := &hierPartIn{req: req, reply: make(chan *rpcpb.Error, 1)}
	if err := rt.leaf.submit(ctx, hierInput{part: in}); err != nil {
		return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "node n%d: the leaf validator did not take the part: %v", n.NodeID(), err))
	}
	select {
	case e := <-in.reply:
		if e != nil {
			return fail(e)
		}
	case <-ctx.Done():
		// Queued: the leaf may still take it.
		return fail(pbErr(rpcpb.ErrorCode_AMBIGUOUS, "node n%d: part of txn %d not taken in time: %v", n.NodeID(), txn, ctx.Err()))
	}
	if !answer {
		return &rpcpb.HierCommitResponse{}, nil
	}
	select {
	case d := <-decided:
		return &rpcpb.HierCommitResponse{Decided: true, Committed: d.Commit, CommitTs: d.TS}, nil
	case <-ctx.Done():
		return fail(pbErr(rpcpb.ErrorCode_AMBIGUOUS, "node n%d: txn %d not decided in time: %v", n.NodeID(), txn, ctx.Err()))
	}
}

// partKeys lists a part's keys (reads and writes).
func partKeys(req *rpcpb.HierCommitRequest) [][]byte {
	ks := append([][]byte(nil), req.Reads...)
	for _, w := range req.Writes {
		ks = append(ks, w.Key)
	}
	return ks
}

// validatePart checks a part's shape and limits (INVALID_ARGUMENT).
func (rt *hierRuntime) validatePart(req *rpcpb.HierCommitRequest) *rpcpb.Error {
	if req.StartTs == 0 {
		return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "part without a start timestamp")
	}
	if len(req.Nodes) == 0 {
		return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "part without nodes")
	}
	self := false
	for i, nd := range req.Nodes {
		if i > 0 && nd <= req.Nodes[i-1] {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "nodes %v not sorted and unique", req.Nodes)
		}
		if _, ok := rt.tree.Leaf(hierarchy.NodeID(nd)); !ok {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "node %d is not in the validator tree %s", nd, rt.treeText)
		}
		self = self || nd == rt.self
	}
	if !self {
		return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "nodes %v leave out this node n%d", req.Nodes, rt.self)
	}
	if n := len(req.Reads) + len(req.Writes); n == 0 || n > keys.TxnKeysMax {
		return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "part of %d keys: must be in [1, TxnKeysMax (%d)]", n, keys.TxnKeysMax)
	}
	seen := map[string]bool{}
	for _, w := range req.Writes {
		if !keys.IsUser(w.Key) || len(w.Key) > keys.KeyBytesMax+1 {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "write key %q is not a user key of at most KeyBytesMax (%d) bytes", w.Key, keys.KeyBytesMax)
		}
		if len(w.Value) > keys.ValueBytesMax {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "value of %d bytes exceeds ValueBytesMax (%d bytes)", len(w.Value), keys.ValueBytesMax)
		}
		if seen[string(w.Key)] {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "key %q is written twice in one part", w.Key)
		}
		seen[string(w.Key)] = true
	}
	for _, k := range req.Reads {
		if !keys.IsUser(k) || len(k) > keys.KeyBytesMax+1 {
			return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "read key %q is not a user key of at most KeyBytesMax (%d) bytes", k, keys.KeyBytesMax)
		}
	}
	return nil
}

// Link implements rpcpb.HierarchyServer: another node's stream of
// validator messages for the validators hosted here.
func (s *hierarchyService) Link(stream rpcpb.Hierarchy_LinkServer) error {
	for {
		b, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return stream.SendAndClose(&rpcpb.HierLinkAck{})
		}
		if err != nil {
			return err
		}
		rt := s.n.hier.Load()
		if rt == nil || b.GetTree() != rt.treeText {
			continue // not (yet) running this tree: lost, and made up for
		}
		for _, m := range b.GetMessages() {
			rt.deliver(hierMessageFromProto(m))
		}
	}
}

// hierLink sends one node's validator messages to another on one stream,
// in order (FIFO per link). A message that finds the queue full, or is in
// a batch whose send fails, is lost; the core makes up for lost messages
// (a leaf votes again and looks its overdue parts up after ResendAfter).
// The Raft link's injected fault (Node.SetLinkFault) applies here too: a
// delay holds each message that long from when it was queued (a delay
// line: messages queued together leave together), a drop loses it.
type hierLink struct {
	rt   *hierRuntime
	to   uint64
	q    chan hierQueued
	quit chan struct{}
	done chan struct{}
}

type hierQueued struct {
	m  *rpcpb.HierMessage
	at time.Time
}

func (rt *hierRuntime) link(to uint64) *hierLink {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	l := rt.mu.links[to]
	if l == nil {
		l = &hierLink{rt: rt, to: to, q: make(chan hierQueued, hierLinkQueueMax), quit: make(chan struct{}), done: make(chan struct{})}
		rt.mu.links[to] = l
		if rt.mu.stopped {
			close(l.quit)
		}
		go l.run()
	}
	return l
}

func (l *hierLink) enqueue(m *rpcpb.HierMessage) {
	select {
	case l.q <- hierQueued{m: m, at: time.Now()}:
	default:
		l.rt.metrics.add(&l.rt.metrics.dropped, 1)
	}
}

func (l *hierLink) stop() {
	select {
	case <-l.quit:
	default:
		close(l.quit)
	}
	<-l.done
}

func (l *hierLink) run() {
	defer close(l.done)
	var stream rpcpb.Hierarchy_LinkClient
	var cancel context.CancelFunc = func() {}
	defer func() { cancel() }()
	// held is a message taken from the queue that was not due yet.
	var held *hierQueued
	for {
		first := held
		held = nil
		if first == nil {
			select {
			case <-l.quit:
				if stream != nil {
					_, _ = stream.CloseAndRecv()
				}
				return
			case q := <-l.q:
				first = &q
			}
		}
		fault := l.rt.n.transport.fault(l.to)
		if fault.Delay > 0 {
			if !l.sleepUntil(first.at.Add(fault.Delay)) {
				continue // quitting
			}
			l.rt.metrics.delayed.add(1, time.Since(first.at))
		}
		b := &rpcpb.HierLinkBatch{FromNodeId: l.rt.self, Tree: l.rt.treeText, Messages: []*rpcpb.HierMessage{first.m}}
	fill:
		for len(b.Messages) < hierLinkBatchMax {
			select {
			case q := <-l.q:
				if fault.Delay > 0 && time.Until(q.at.Add(fault.Delay)) > 0 {
					held = &q
					break fill
				}
				b.Messages = append(b.Messages, q.m)
			default:
				break fill
			}
		}
		if fault.Drop {
			l.rt.metrics.add(&l.rt.metrics.dropped, int64(len(b.Messages)))
			continue
		}
		if stream == nil {
			var err error
			if stream, cancel, err = l.open(); err != nil {
				stream = nil
				l.rt.metrics.add(&l.rt.metrics.dropped, int64(len(b.Messages)))
				l.pause()
				continue
			}
		}
		if err := stream.Send(b); err != nil {
			cancel()
			stream = nil
			l.rt.metrics.add(&l.rt.metrics.dropped, int64(len(b.Messages)))
			l.pause()
		}
	}
}

// sleepUntil waits until t; false if the link is stopping.
func (l *hierLink) sleepUntil(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-l.quit:
		return false
	case <-tm.C:
		return true
	}
}

// pause waits a little after a failed send (the peer may be down).
func (l *hierLink) pause() {
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-l.quit:
	case <-t.C:
	}
}

// open opens the link's stream.
func (l *hierLink) open() (rpcpb.Hierarchy_LinkClient, context.CancelFunc, error) {
	n := l.rt.n
	conn, err := n.conn(n.nodeAddress(l.to))
	if err != nil {
		return nil, func() {}, err
	}
	ctx, cancel := context.WithCancel(n.stopCtx)
	stream, err := rpcpb.NewHierarchyClient(conn).Link(ctx)
	if err != nil {
		cancel()
		return nil, func() {}, err
	}
	return stream, cancel, nil
}
