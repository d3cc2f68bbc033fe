package kvserver

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// These tests run the transport between in-process gRPC servers, with a
// transportEnv of their own in place of a Node: each peer's Internal
// service is a raftSink that records what arrives. No assertion depends
// on timing: the tests wait (with generous deadlines) for conditions.

// waitDeadline bounds every wait for a condition: long enough that only a
// hang reaches it on a loaded machine.
const waitDeadline = 60 * time.Second

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// raftSink is a peer's Internal service: it records the Raft messages it
// receives, over the stream and over the unary RPC, in arrival order.
type raftSink struct {
	rpcpb.UnimplementedInternalServer
	// stall makes RaftStream stop reading, so that the sender's flow
	// control window fills and its Send blocks.
	stall bool
	// onMessage, when set, is called for every message received.
	onMessage func()
	// discard keeps no record of the messages (benchmarks).
	discard bool

	mu struct {
		sync.Mutex
		msgs      []raftpb.Message
		unary     int // messages that came by the unary Raft RPC
		oversized int // stream batches over the batch limits
	}
}

func (s *raftSink) receive(rm *rpcpb.RaftMessage) {
	var m raftpb.Message
	if err := m.Unmarshal(rm.Message); err != nil {
		panic(err)
	}
	if !s.discard {
		s.mu.Lock()
		s.mu.msgs = append(s.mu.msgs, m)
		s.mu.Unlock()
	}
	if s.onMessage != nil {
		s.onMessage()
	}
}

func (s *raftSink) RaftStream(stream rpcpb.Internal_RaftStreamServer) error {
	if s.stall {
		<-stream.Context().Done()
		return stream.Context().Err()
	}
	return serveRaftStream(stream, func(b *rpcpb.RaftMessageBatch) {
		if len(b.Messages) > 1 && (len(b.Messages) > PeerBatchMessagesMax || batchBytes(b.Messages) > PeerBatchBytesMax) {
			s.mu.Lock()
			s.mu.oversized++
			s.mu.Unlock()
		}
		for _, rm := range b.Messages {
			s.receive(rm)
		}
	})
}

func (s *raftSink) Raft(ctx context.Context, req *rpcpb.RaftMessageBatch) (*rpcpb.RaftMessageBatchResponse, error) {
	for _, rm := range req.Messages {
		s.receive(rm)
	}
	s.mu.Lock()
	s.mu.unary += len(req.Messages)
	s.mu.Unlock()
	return &rpcpb.RaftMessageBatchResponse{}, nil
}

func (s *raftSink) messages() []raftpb.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]raftpb.Message(nil), s.mu.msgs...)
}

func (s *raftSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.msgs)
}

// testServer is one peer's gRPC server; it can be stopped and started
// again on the same address.
type testServer struct {
	addr string
	sink *raftSink
	srv  *grpc.Server
}

func startTestServer(t testing.TB, addr string, sink *raftSink) *testServer {
	t.Helper()
	var lis net.Listener
	var err error
	// The port of a stopped server is normally free at once; retry a
	// little in case the kernel disagrees.
	waitFor(t, "listening on "+addr, func() bool {
		lis, err = net.Listen("tcp", addr)
		return err == nil
	})
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	rpcpb.RegisterInternalServer(srv, sink)
	go func() { _ = srv.Serve(lis) }()
	ts := &testServer{addr: lis.Addr().String(), sink: sink, srv: srv}
	t.Cleanup(srv.Stop)
	return ts
}

// testEnv stands in for the Node: addresses, one shared connection per
// peer, and a record of the messages reported unreachable.
type testEnv struct {
	addrs map[uint64]string
	mu    struct {
		sync.Mutex
		conns       map[uint64]*grpc.ClientConn
		unreachable []raftpb.Message
	}
}

func newTestEnv(t testing.TB, addrs map[uint64]string) *testEnv {
	e := &testEnv{addrs: addrs}
	e.mu.conns = map[uint64]*grpc.ClientConn{}
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, c := range e.mu.conns {
			_ = c.Close()
		}
	})
	return e
}

func (e *testEnv) nodeAddress(nodeID uint64) string { return e.addrs[nodeID] }

func (e *testEnv) internalClient(nodeID uint64) (rpcpb.InternalClient, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.mu.conns[nodeID]
	if c == nil {
		var err error
		c, err = grpc.NewClient(e.addrs[nodeID], grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			return nil, err
		}
		e.mu.conns[nodeID] = c
	}
	return rpcpb.NewInternalClient(c), nil
}

// sendSnapshot sends rm by the unary Raft RPC, whose reply confirms it
// (a Node streams the snapshot's data instead: snapshot.go).
func (e *testEnv) sendSnapshot(ctx context.Context, rm *rpcpb.RaftMessage) error {
	cl, err := e.internalClient(rm.ToNodeId)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, RaftSendTimeout)
	defer cancel()
	_, err = cl.Raft(ctx, &rpcpb.RaftMessageBatch{Messages: []*rpcpb.RaftMessage{rm}})
	return err
}

func (e *testEnv) reportUnreachable(rangeID uint64, m *raftpb.Message) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mu.unreachable = append(e.mu.unreachable, *m)
}

func (e *testEnv) unreachable() []raftpb.Message {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]raftpb.Message(nil), e.mu.unreachable...)
}

// startTestTransport returns a transport from node 1 to a server playing
// node 2 (and the env recording what the transport reports).
func startTestTransport(t testing.TB, sink *raftSink) (*transport, *testEnv, *testServer) {
	t.Helper()
	ts := startTestServer(t, "127.0.0.1:0", sink)
	env := newTestEnv(t, map[uint64]string{2: ts.addr})
	tr := newTransportEnv(env, nil)
	t.Cleanup(tr.stop)
	return tr, env, ts
}

// appMsg is a MsgApp from node from to node to, numbered by Index, with
// payloadBytes of entry data.
func appMsg(from, to, index uint64, payloadBytes int) raftpb.Message {
	return raftpb.Message{Type: raftpb.MsgApp, From: from, To: to, Index: index,
		Entries: []raftpb.Entry{{Index: index + 1, Data: make([]byte, payloadBytes)}}}
}

// checkInOrder fails unless msgs are numbered first, first+1, ... in turn.
func checkInOrder(t *testing.T, msgs []raftpb.Message, first uint64) {
	t.Helper()
	for i, m := range msgs {
		if m.Index != first+uint64(i) {
			t.Fatalf("message %d of %d has index %d, want %d", i, len(msgs), m.Index, first+uint64(i))
		}
	}
}

// TestTransportStreamInOrder: messages between two nodes, both ways at
// once, arrive all and in the order sent; large messages are batched
// within the byte limit.
func TestTransportStreamInOrder(t *testing.T) {
	sinks := map[uint64]*raftSink{1: {}, 2: {}}
	addrs := map[uint64]string{}
	for id, s := range sinks {
		addrs[id] = startTestServer(t, "127.0.0.1:0", s).addr
	}
	// Fewer messages than PeerQueueMessagesMax, so that none is dropped
	// for a full queue.
	const count = 2000
	var wg sync.WaitGroup
	for from, to := range map[uint64]uint64{1: 2, 2: 1} {
		env := newTestEnv(t, addrs)
		tr := newTransportEnv(env, nil)
		t.Cleanup(tr.stop)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); i <= count; i++ {
				size := 256
				if i%100 == 0 {
					size = 1 << 20 // some batches hit the byte bound
				}
				tr.Send(7, []raftpb.Message{appMsg(from, to, i, size)})
			}
		}()
		t.Cleanup(func() {
			if u := env.unreachable(); len(u) > 0 {
				t.Errorf("n%d: %d messages reported unreachable", from, len(u))
			}
		})
	}
	wg.Wait()
	for id, s := range sinks {
		waitFor(t, "every message", func() bool { return s.count() >= count })
		checkInOrder(t, s.messages(), 1)
		s.mu.Lock()
		if s.mu.oversized > 0 {
			t.Errorf("n%d received %d batches over the limits", id, s.mu.oversized)
		}
		s.mu.Unlock()
	}
}

// TestTransportPeerRestart: when the peer's server stops and starts again
// on the same address, the transport reconnects and later messages
// arrive, in order.
func TestTransportPeerRestart(t *testing.T) {
	sink := &raftSink{}
	tr, _, ts := startTestTransport(t, sink)
	for i := uint64(1); i <= 100; i++ {
		tr.Send(7, []raftpb.Message{appMsg(1, 2, i, 256)})
	}
	waitFor(t, "messages before the restart", func() bool { return sink.count() >= 100 })
	checkInOrder(t, sink.messages(), 1)

	ts.srv.Stop()
	// Messages sent while the peer is down are lost or reported
	// unreachable; Raft retransmits.
	for i := uint64(101); i <= 200; i++ {
		tr.Send(7, []raftpb.Message{appMsg(1, 2, i, 256)})
	}
	sink2 := &raftSink{}
	startTestServer(t, ts.addr, sink2)
	// Probe until the transport has reconnected: a probe arrives.
	next := uint64(1000)
	waitFor(t, "a message after the restart", func() bool {
		tr.Send(7, []raftpb.Message{appMsg(1, 2, next, 256)})
		next++
		time.Sleep(10 * time.Millisecond)
		return sink2.count() > 0
	})
	// The stream is up: what is sent now arrives, in order.
	for i := uint64(1); i <= 100; i++ {
		tr.Send(7, []raftpb.Message{appMsg(1, 2, 10000+i, 256)})
	}
	waitFor(t, "messages after the restart", func() bool {
		msgs := sink2.messages()
		return len(msgs) > 0 && msgs[len(msgs)-1].Index == 10100
	})
	var after []raftpb.Message
	for _, m := range sink2.messages() {
		if m.Index > 10000 {
			after = append(after, m)
		}
	}
	checkInOrder(t, after, 10001)
}

// TestTransportLinkFaults: a Drop fault drops every message and reports
// it unreachable; a Delay fault delivers every message, in order; with
// the fault cleared, messages flow again.
func TestTransportLinkFaults(t *testing.T) {
	sink := &raftSink{}
	tr, env, _ := startTestTransport(t, sink)

	tr.SetLinkFault(2, LinkFault{Drop: true})
	for i := uint64(1); i <= 50; i++ {
		tr.Send(7, []raftpb.Message{appMsg(1, 2, i, 256)})
	}
	waitFor(t, "dropped messages reported unreachable", func() bool { return len(env.unreachable()) >= 50 })
	if n := sink.count(); n != 0 {
		t.Fatalf("%d messages arrived over a dropping link", n)
	}

	tr.SetLinkFault(2, LinkFault{Delay: 20 * time.Millisecond})
	for i := uint64(101); i <= 200; i++ {
		tr.Send(7, []raftpb.Message{appMsg(1, 2, i, 256)})
	}
	waitFor(t, "delayed messages", func() bool { return sink.count() >= 100 })
	checkInOrder(t, sink.messages(), 101)

	tr.SetLinkFault(2, LinkFault{})
	tr.Send(7, []raftpb.Message{appMsg(1, 2, 201, 256)})
	waitFor(t, "a message over the healed link", func() bool { return sink.count() >= 101 })
	checkInOrder(t, sink.messages(), 101)
	if n := len(env.unreachable()); n != 50 {
		t.Fatalf("%d messages reported unreachable, want the 50 dropped", n)
	}
}

// TestTransportSnapshot: a snapshot goes alone to the env's sendSnapshot
// (here the unary RPC, whose reply confirms it); one that cannot be
// delivered is reported as a failed snapshot (reportUnreachable with
// MsgSnap).
func TestTransportSnapshot(t *testing.T) {
	sink := &raftSink{}
	tr, env, ts := startTestTransport(t, sink)
	snap := raftpb.Message{Type: raftpb.MsgSnap, From: 1, To: 2,
		Snapshot: &raftpb.Snapshot{Data: make([]byte, 1<<20), Metadata: raftpb.SnapshotMetadata{Index: 5, Term: 1}}}
	tr.Send(7, []raftpb.Message{appMsg(1, 2, 1, 256), snap, appMsg(1, 2, 2, 256)})
	waitFor(t, "the snapshot and the messages", func() bool { return sink.count() >= 3 })
	sink.mu.Lock()
	unary := sink.mu.unary
	sink.mu.Unlock()
	if unary != 1 {
		t.Fatalf("%d messages came by the unary RPC, want the snapshot alone", unary)
	}

	ts.srv.Stop()
	tr.Send(7, []raftpb.Message{snap})
	waitFor(t, "the snapshot reported failed", func() bool {
		for _, m := range env.unreachable() {
			if m.Type == raftpb.MsgSnap {
				return true
			}
		}
		return false
	})
}

// TestTransportStopStalledPeer: stop returns, with every goroutine done,
// while the sender is blocked on a peer that reads nothing.
func TestTransportStopStalledPeer(t *testing.T) {
	sink := &raftSink{stall: true}
	ts := startTestServer(t, "127.0.0.1:0", sink)
	env := newTestEnv(t, map[uint64]string{2: ts.addr})
	tr := newTransportEnv(env, nil)
	// Far more than any flow control window: the sender blocks in Send.
	for i := uint64(1); i <= 200; i++ {
		tr.Send(7, []raftpb.Message{appMsg(1, 2, i, 256<<10)})
	}
	stopped := make(chan struct{})
	go func() { tr.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(waitDeadline):
		t.Fatal("stop hangs on a stalled peer")
	}
	// After stop, Send reports instead of queueing.
	before := len(env.unreachable())
	tr.Send(7, []raftpb.Message{appMsg(1, 2, 1000, 256)})
	if n := len(env.unreachable()); n != before+1 {
		t.Fatalf("a message sent after stop was not reported unreachable")
	}
}

// BenchmarkTransportStream sends b.N MsgApps of 256 bytes from one
// transport to a peer server, at most half a queue outstanding (Send
// drops when the queue is full), and waits until all have arrived. The
// link is loopback, or goes through a proxy that delays every byte by a
// one-way latency, as a network would.
func BenchmarkTransportStream(b *testing.B) {
	for _, latency := range []time.Duration{0, time.Millisecond} {
		b.Run("latency="+latency.String(), func(b *testing.B) { benchmarkTransport(b, latency) })
	}
}

func benchmarkTransport(b *testing.B, latency time.Duration) {
	const outstandingMax = PeerQueueMessagesMax / 2
	credits := make(chan struct{}, outstandingMax)
	var received atomic.Int64
	sink := &raftSink{discard: true, onMessage: func() { <-credits; received.Add(1) }}
	ts := startTestServer(b, "127.0.0.1:0", sink)
	addr := ts.addr
	if latency > 0 {
		addr = startLatencyProxy(b, ts.addr, latency)
	}
	env := newTestEnv(b, map[uint64]string{2: addr})
	tr := newTransportEnv(env, nil)
	b.Cleanup(tr.stop)
	// Warm up: the connection and the stream are open.
	credits <- struct{}{}
	tr.Send(7, []raftpb.Message{appMsg(1, 2, 0, 256)})
	waitFor(b, "warm-up", func() bool { return received.Load() == 1 })
	msgs := make([]raftpb.Message, 1)
	b.SetBytes(256)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		credits <- struct{}{}
		msgs[0] = appMsg(1, 2, uint64(i+1), 256)
		tr.Send(7, msgs)
	}
	waitFor(b, "every message", func() bool { return received.Load() == int64(b.N)+1 })
	b.StopTimer()
	if u := env.unreachable(); len(u) > 0 {
		b.Fatalf("%d messages reported unreachable", len(u))
	}
}

// startLatencyProxy forwards TCP connections to target, each byte
// delivered oneWay after it was read, in order, both ways. It returns the
// proxy's address.
func startLatencyProxy(tb testing.TB, target string, oneWay time.Duration) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	tb.Cleanup(func() {
		_ = lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, d)
			mu.Unlock()
			go delayBytes(d, c, oneWay)
			go delayBytes(c, d, oneWay)
		}
	}()
	return lis.Addr().String()
}

func delayBytes(dst, src net.Conn, oneWay time.Duration) {
	type chunk struct {
		due  time.Time
		data []byte
	}
	ch := make(chan chunk, 4096)
	go func() {
		defer dst.Close()
		for c := range ch {
			time.Sleep(time.Until(c.due))
			if _, err := dst.Write(c.data); err != nil {
				return
			}
		}
	}()
	defer close(ch)
	for {
		buf := make([]byte, 64<<10)
		n, err := src.Read(buf)
		if n > 0 {
			ch <- chunk{due: time.Now().Add(oneWay), data: buf[:n]}
		}
		if err != nil {
			return
		}
	}
}
