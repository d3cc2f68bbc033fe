package kvserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"go.etcd.io/raft/v3/raftpb"
)

// Limits of the Raft transport.
const (
	// PeerQueueMessagesMax bounds the messages queued for one peer; more
	// are dropped (Raft retransmits) and the peer reported unreachable.
	PeerQueueMessagesMax = 4096
	// PeerBatchMessagesMax bounds the messages sent in one batch.
	PeerBatchMessagesMax = 256
	// PeerBatchBytesMax bounds the marshalled Raft messages of one batch;
	// a single larger message (a big MsgApp) goes in a batch of its own.
	PeerBatchBytesMax = 4 << 20
	// PeerDelayedBatchesMax bounds the batches in a link's delay line
	// (LinkFault.Delay); more are dropped and reported unreachable.
	PeerDelayedBatchesMax = 1024
	// RaftSendTimeout bounds one Send on a peer's stream (which blocks
	// while gRPC's flow control window to the peer is full) and one
	// snapshot RPC. A Send that outlasts it breaks the stream.
	RaftSendTimeout = 10 * time.Second
	// RaftStreamOpenTimeout bounds the opening of a peer's stream (which
	// waits while the connection to the peer is being established).
	RaftStreamOpenTimeout = 10 * time.Second
	// RaftStreamBackoffMin and RaftStreamBackoffMax bound the wait before
	// a peer's stream is opened again after a failure: it starts at the
	// minimum and doubles with each failure in a row, up to the maximum.
	// Batches sent while the transport waits are reported unreachable at
	// once, so Raft knows the peer is down.
	RaftStreamBackoffMin = 50 * time.Millisecond
	RaftStreamBackoffMax = time.Second
)

// LinkFault is injected on the link to one peer (there is no netem here):
// every message arrives Delay later than sent (a one-way delay: messages
// still pipeline, in order), or is dropped when Drop is set.
type LinkFault struct {
	Delay time.Duration
	Drop  bool
}

// transportEnv is what the transport needs from its node (*Node
// implements it); tests supply their own.
type transportEnv interface {
	// nodeAddress is "" for a node the transport cannot reach.
	nodeAddress(nodeID uint64) string
	// internalClient is a client over the node's one shared connection to
	// nodeID.
	internalClient(nodeID uint64) (rpcpb.InternalClient, error)
	// reportUnreachable tells the range's replica that m was not
	// delivered (and, for a MsgSnap, that the snapshot failed).
	reportUnreachable(rangeID uint64, m *raftpb.Message)
	// sendSnapshot delivers MsgSnap rm with its data (Node streams it:
	// snapshot.go) and returns once the peer has taken it or failed.
	sendSnapshot(ctx context.Context, rm *rpcpb.RaftMessage) error
}

// transport sends Raft messages to peers: one queue and one sender
// goroutine per peer, so that a slow peer delays no other, and one
// long-lived gRPC stream per peer (Internal.RaftStream), so that the
// messages from this node to a peer flow in one direction, in order, many
// batches in flight.
//
// The sender drains its queue into batches (PeerBatchMessagesMax,
// PeerBatchBytesMax) and sends each on the stream without waiting for any
// reply. What is in flight is bounded by gRPC's HTTP/2 flow control
// window on the stream and the connection: when it is full, Send blocks
// (at most RaftSendTimeout) and the queue fills behind it (at most
// PeerQueueMessagesMax, then Send drops).
//
// A Send that returns has handed the batch to gRPC, not to the peer: the
// batches in flight when a stream breaks are lost without a report. Raft
// tolerates that (a lost MsgApp is found by the follower's rejection or
// the next heartbeat response, and sent again); the batch whose Send
// fails is reported unreachable, which sends its replicas' progress back
// to probing. The stream is then opened again, lazily, after a bounded
// backoff. A snapshot (MsgSnap) is the exception: Raft waits for its
// outcome, so a lost one must be reported as failed. Snapshots therefore
// go alone by the unary Raft RPC, whose reply says the peer has stepped
// it, and a failure is reported as before.
//
// Rejected designs:
//   - one unary RPC per batch, one in flight (what this replaced): every
//     batch waits for a round trip, so a peer's throughput is one batch
//     per round trip, and heartbeats queue behind a large MsgApp's reply;
//   - several unary RPCs in flight: they may arrive out of order, and the
//     window needs its own limit and bookkeeping;
//   - a bidirectional stream acknowledging every batch: Raft needs no
//     acknowledgement but a snapshot's, which the unary RPC gives.
//
// Link faults (SetLinkFault) apply to batches before they are sent: a
// dropped batch is reported unreachable; a delayed batch waits in the
// peer's delay line (PeerDelayedBatchesMax) until due, behind the batches
// delayed before it, then goes out like any other.
type transport struct {
	env transportEnv
	log *slog.Logger
	// ctx is cancelled by stop; the peers' streams and RPCs derive from
	// it, so that stop never waits for a peer.
	ctx    context.Context
	cancel context.CancelFunc
	mu     struct {
		sync.Mutex
		peers  map[uint64]*peer
		faults map[uint64]LinkFault
		// stopped is set by stop. Invariant: no peer goroutine is started
		// once it is set (so that wg.Add never races stop's wg.Wait).
		stopped bool
	}
	wg sync.WaitGroup
	// batchesSent and messagesSent count the batches handed to the peers'
	// streams and the messages in them (canopy_raft_transport_*_sent_total):
	// their ratio is how well the senders batch.
	batchesSent, messagesSent atomic.Uint64
	// delayed counts the Raft batches an injected delay held
	// (LinkFault.Delay) and the time they were held in fact, pushed to
	// sent (Node.LinkDelays).
	delayed heldDelays
}

// heldDelays counts batches held for an injected link delay and the time
// they were held in fact: Go's timers make it longer than the delay asked
// for (about 1 ms where less is asked), and benchmarks state what they
// ran with. The Raft transport and the validator links keep one each.
type heldDelays struct{ batches, ns atomic.Int64 }

func (h *heldDelays) add(batches int, held time.Duration) {
	h.batches.Add(int64(batches))
	h.ns.Add(int64(held))
}

func (h *heldDelays) load() (batches int64, held time.Duration) {
	return h.batches.Load(), time.Duration(h.ns.Load())
}

// peer is the queue to one peer, drained by its sender goroutine (run).
type peer struct {
	nodeID uint64
	ch     chan outgoingMessage
	// beat carries the liveness beats (transport.beat): this node's ID.
	// Capacity 1: beats do not pile up behind a slow peer.
	beat chan uint64
}

// outgoingMessage is a queued Raft message.
type outgoingMessage struct {
	msg *rpcpb.RaftMessage
	// snapshot is set for a MsgSnap, which is sent alone, by sendSnapshot.
	snapshot bool
}

// outgoingBatch is what the sender sends at once.
//
// Invariant: 1 <= len(msgs) <= PeerBatchMessagesMax; bytes is the sum of
// the messages' lengths and is at most PeerBatchBytesMax unless msgs has
// a single message; a snapshot batch has a single message.
type outgoingBatch struct {
	msgs     []*rpcpb.RaftMessage
	bytes    int
	snapshot bool
}

func (b *outgoingBatch) check() {
	if len(b.msgs) == 0 || len(b.msgs) > PeerBatchMessagesMax ||
		(len(b.msgs) > 1 && (b.bytes > PeerBatchBytesMax || b.snapshot)) {
		panic(fmt.Sprintf("kvserver: Raft batch of %d messages, %d bytes (snapshot %t) breaks the batch limits",
			len(b.msgs), b.bytes, b.snapshot))
	}
}

func newTransport(n *Node) *transport { return newTransportEnv(n, n.log) }

// newTransportEnv returns a transport for env; a nil log discards.
func newTransportEnv(env transportEnv, log *slog.Logger) *transport {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &transport{env: env, log: log}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.mu.peers = map[uint64]*peer{}
	t.mu.faults = map[uint64]LinkFault{}
	return t
}

// SetLinkFault injects (or with the zero LinkFault, clears) a fault on
// the link to nodeID.
func (t *transport) SetLinkFault(nodeID uint64, f LinkFault) {
	t.mu.Lock()
	t.mu.faults[nodeID] = f
	t.mu.Unlock()
}

func (t *transport) fault(nodeID uint64) LinkFault {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.faults[nodeID]
}

// Send implements replica.Transport. It never blocks: a message that
// cannot be queued is reported unreachable.
func (t *transport) Send(rangeID uint64, msgs []raftpb.Message) { t.send(rangeID, msgs, false) }

// SendQuiesce implements replica.QuiesceTransport: msgs go as Send's, each
// marked quiesce.
func (t *transport) SendQuiesce(rangeID uint64, msgs []raftpb.Message) { t.send(rangeID, msgs, true) }

// beat is the liveness heartbeat (see liveness), called on every tick of
// the node: each peer in peers that was sent no batch since the last beat
// is sent an empty one, from node self. It never blocks.
func (t *transport) beat(self uint64, peers []uint64) {
	for _, id := range peers {
		if p := t.peer(id); p != nil {
			select {
			case p.beat <- self:
			default: // the last beat is still pending
			}
		}
	}
}

func (t *transport) send(rangeID uint64, msgs []raftpb.Message, quiesce bool) {
	for i := range msgs {
		m := &msgs[i]
		data, err := m.Marshal()
		if err != nil {
			panic(err)
		}
		// Raft names replicas by peer ID; the node is packed in it.
		to := replica.NodeOf(m.To)
		p := t.peer(to)
		if p == nil {
			t.env.reportUnreachable(rangeID, m)
			continue
		}
		out := outgoingMessage{
			msg:      &rpcpb.RaftMessage{RangeId: rangeID, FromNodeId: replica.NodeOf(m.From), ToNodeId: to, Message: data, Quiesce: quiesce},
			snapshot: m.Type == raftpb.MsgSnap,
		}
		select {
		case p.ch <- out:
		default:
			t.env.reportUnreachable(rangeID, m)
		}
	}
}

// peer returns the queue to nodeID, starting its sender; nil once the
// transport is stopped or for a node without an address.
func (t *transport) peer(nodeID uint64) *peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.stopped {
		return nil
	}
	if p := t.mu.peers[nodeID]; p != nil {
		return p
	}
	if t.env.nodeAddress(nodeID) == "" {
		return nil
	}
	p := &peer{nodeID: nodeID, ch: make(chan outgoingMessage, PeerQueueMessagesMax), beat: make(chan uint64, 1)}
	t.mu.peers[nodeID] = p
	t.wg.Add(1)
	go t.run(p)
	return p
}

// run is p's sender: it batches p's queue, applies the link's fault, and
// sends, until the transport stops. It alone uses the peer's stream.
func (t *transport) run(p *peer) {
	defer t.wg.Done()
	s := &peerStream{t: t, nodeID: p.nodeID}
	defer s.close()
	line := newDelayLine()
	defer line.timer.Stop()
	var carry *outgoingMessage // taken from the queue, not yet batched
	// sent: a batch went (or was dropped or delayed by a fault) since the
	// last beat; then the beat needs no batch of its own.
	sent := false
	for {
		var first outgoingMessage
		if carry != nil {
			first, carry = *carry, nil
		} else {
			select {
			case <-t.ctx.Done():
				return
			case <-line.due():
				out, held := line.popDue(time.Now())
				for _, b := range out {
					s.send(b)
				}
				t.delayed.add(len(out), held)
				continue
			case self := <-p.beat:
				s.from = self
				if !sent {
					// An empty batch: it says only that this node is alive.
					switch f := t.fault(p.nodeID); {
					case f.Drop:
					case f.Delay > 0:
						line.push(time.Now().Add(f.Delay), outgoingBatch{})
					default:
						s.send(outgoingBatch{})
					}
				}
				sent = false
				continue
			case first = <-p.ch:
			}
		}
		sent = true
		var b outgoingBatch
		b, carry = collect(first, p.ch)
		b.check()
		switch f := t.fault(p.nodeID); {
		case f.Drop:
			t.failBatch(b.msgs)
		case f.Delay > 0:
			if !line.push(time.Now().Add(f.Delay), b) {
				t.failBatch(b.msgs) // the delay line is full
			}
		default:
			s.send(b)
		}
	}
}

// collect returns a batch of first and the messages queued behind it,
// within the batch limits, and the message taken from the queue that did
// not fit, if any.
func collect(first outgoingMessage, ch <-chan outgoingMessage) (outgoingBatch, *outgoingMessage) {
	b := outgoingBatch{msgs: []*rpcpb.RaftMessage{first.msg}, bytes: len(first.msg.Message), snapshot: first.snapshot}
	if first.snapshot {
		return b, nil
	}
	for len(b.msgs) < PeerBatchMessagesMax {
		select {
		case m := <-ch:
			if m.snapshot || b.bytes+len(m.msg.Message) > PeerBatchBytesMax {
				return b, &m
			}
			b.msgs = append(b.msgs, m.msg)
			b.bytes += len(m.msg.Message)
		default:
			return b, nil
		}
	}
	return b, nil
}

// batchBytes is the size of msgs as PeerBatchBytesMax counts it.
func batchBytes(msgs []*rpcpb.RaftMessage) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Message)
	}
	return n
}

// delayLine holds a link's delayed batches until due, in the order they
// were sent: a batch waits for those before it even if it is due earlier
// (the delay was lowered), as on a wire. Only the peer's sender uses it.
type delayLine struct {
	// batches is in the order sent. Invariant: len(batches) <=
	// PeerDelayedBatchesMax, and timer is armed iff batches is not empty.
	batches []delayedBatch
	timer   *time.Timer
}

type delayedBatch struct {
	// pushed is when the batch entered the line, due when it may leave.
	pushed, due time.Time
	batch       outgoingBatch
}

func newDelayLine() *delayLine {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &delayLine{timer: t}
}

// due is a channel that fires when the first batch is due; nil (blocking
// for ever) when the line is empty.
func (l *delayLine) due() <-chan time.Time {
	if len(l.batches) == 0 {
		return nil
	}
	return l.timer.C
}

// push appends b, due at due; false if the line is full.
func (l *delayLine) push(due time.Time, b outgoingBatch) bool {
	if len(l.batches) >= PeerDelayedBatchesMax {
		return false
	}
	l.batches = append(l.batches, delayedBatch{pushed: time.Now(), due: due, batch: b})
	if len(l.batches) == 1 {
		l.timer.Reset(time.Until(due))
	}
	return true
}

// popDue removes and returns the batches at the front of the line that
// are due at now, with the sum of the time they were in the line, and
// arms the timer for the next.
func (l *delayLine) popDue(now time.Time) (out []outgoingBatch, held time.Duration) {
	for len(l.batches) > 0 && !l.batches[0].due.After(now) {
		out = append(out, l.batches[0].batch)
		held += now.Sub(l.batches[0].pushed)
		l.batches[0] = delayedBatch{}
		l.batches = l.batches[1:]
	}
	if len(l.batches) > 0 {
		l.timer.Reset(l.batches[0].due.Sub(now))
	}
	return out, held
}

// errRaftStreamBackoff is returned for a batch sent while the transport
// waits before opening a peer's stream again.
var errRaftStreamBackoff = errors.New("kvserver: Raft stream to peer is backing off after a failure")

// errRaftStreamTimeout is returned when a stream's open or Send outlasted
// its timeout, and the stream was cancelled.
var errRaftStreamTimeout = errors.New("kvserver: Raft stream to peer timed out")

// peerStream is the client end of the Raft stream to one peer. Only the
// peer's sender goroutine uses it, so it has no lock (gRPC forbids
// concurrent Sends on a stream anyway).
type peerStream struct {
	t      *transport
	nodeID uint64
	// from is this node's ID, sent in every batch (0 until the first
	// beat; the messages carry it too).
	from uint64
	// stream is nil while no stream is open. Invariant: stream, cancel
	// and watchdog are all nil or all set.
	stream rpcpb.Internal_RaftStreamClient
	// cancel ends the stream (its context derives from the transport's).
	cancel context.CancelFunc
	// watchdog cancels the stream when a Send outlasts RaftSendTimeout;
	// it is armed only during a Send.
	watchdog *time.Timer
	openedAt time.Time
	// backoff is the wait after the latest failure (0 before any);
	// retryAt is when a stream may be opened again.
	// Invariant: backoff is 0 or within [RaftStreamBackoffMin, RaftStreamBackoffMax].
	backoff time.Duration
	retryAt time.Time
}

// send sends b, reporting its messages unreachable if that fails. A
// snapshot goes on a goroutine of its own (sendSnapshot), so that the
// peer's other messages, heartbeats among them, do not wait behind it.
func (s *peerStream) send(b outgoingBatch) {
	if b.snapshot {
		s.t.sendSnapshot(b.msgs[0])
		return
	}
	if err := s.sendStream(b.msgs); err != nil {
		s.t.failBatch(b.msgs)
	}
}

// sendSnapshot hands MsgSnap rm to the env's sendSnapshot on a goroutine
// that stop waits for, reporting the snapshot failed if it fails.
func (t *transport) sendSnapshot(rm *rpcpb.RaftMessage) {
	t.mu.Lock()
	if t.mu.stopped {
		t.mu.Unlock()
		t.failBatch([]*rpcpb.RaftMessage{rm})
		return
	}
	t.wg.Add(1)
	t.mu.Unlock()
	go func() {
		defer t.wg.Done()
		if err := t.env.sendSnapshot(t.ctx, rm); err != nil {
			t.log.Warn("snapshot not delivered", "range", rm.RangeId, "to", fmt.Sprintf("n%d", rm.ToNodeId), "err", err)
			t.failBatch([]*rpcpb.RaftMessage{rm})
		}
	}()
}

// sendStream sends msgs on the stream, opening it first if need be, and
// does not wait for the peer.
func (s *peerStream) sendStream(msgs []*rpcpb.RaftMessage) error {
	if s.stream == nil {
		if err := s.open(); err != nil {
			return err
		}
	}
	s.watchdog.Reset(RaftSendTimeout)
	err := s.stream.Send(&rpcpb.RaftMessageBatch{Messages: msgs, FromNodeId: s.from})
	if !s.watchdog.Stop() && err == nil {
		err = errRaftStreamTimeout // it cancelled the stream as Send returned
	}
	if err != nil {
		s.fail(err)
		return err
	}
	s.t.batchesSent.Add(1)
	s.t.messagesSent.Add(uint64(len(msgs)))
	return nil
}

// open opens the stream, unless the backoff after a failure has not
// elapsed.
func (s *peerStream) open() error {
	now := time.Now()
	if now.Before(s.retryAt) {
		return errRaftStreamBackoff
	}
	cl, err := s.t.env.internalClient(s.nodeID)
	if err != nil {
		s.backOff(now, false)
		return err
	}
	ctx, cancel := context.WithCancel(s.t.ctx)
	watchdog := time.AfterFunc(RaftStreamOpenTimeout, cancel)
	stream, err := cl.RaftStream(ctx)
	if !watchdog.Stop() && err == nil {
		err = errRaftStreamTimeout
	}
	if err != nil {
		cancel()
		s.backOff(now, false)
		s.t.log.Debug("opening Raft stream", "peer", s.nodeID, "err", err, "retry_in", s.backoff)
		return err
	}
	s.stream, s.cancel, s.watchdog, s.openedAt = stream, cancel, watchdog, now
	return nil
}

// fail closes the stream after err and starts the backoff.
func (s *peerStream) fail(err error) {
	now := time.Now()
	// A stream that lived longer than the longest backoff was healthy:
	// start the backoff over rather than carry on from earlier failures.
	healthy := now.Sub(s.openedAt) >= RaftStreamBackoffMax
	s.close()
	s.backOff(now, healthy)
	s.t.log.Debug("Raft stream failed", "peer", s.nodeID, "err", err, "retry_in", s.backoff)
}

func (s *peerStream) backOff(now time.Time, reset bool) {
	if s.backoff == 0 || reset {
		s.backoff = RaftStreamBackoffMin
	} else {
		s.backoff = min(2*s.backoff, RaftStreamBackoffMax)
	}
	s.retryAt = now.Add(s.backoff)
}

// close ends the stream, if open. Cancelling its context releases it
// whether or not the peer answers.
func (s *peerStream) close() {
	if s.stream == nil {
		return
	}
	s.watchdog.Stop()
	s.cancel()
	s.stream, s.cancel, s.watchdog = nil, nil, nil
}

// failBatch reports batch's messages unreachable (a MsgSnap as a failed
// snapshot: see Node.reportUnreachable).
func (t *transport) failBatch(batch []*rpcpb.RaftMessage) {
	for _, rm := range batch {
		var m raftpb.Message
		if m.Unmarshal(rm.Message) == nil {
			t.env.reportUnreachable(rm.RangeId, &m)
		}
	}
}

// stop closes the streams and waits for the senders. It does not wait
// for any peer: their streams and RPCs are cancelled.
func (t *transport) stop() {
	t.mu.Lock()
	t.mu.stopped = true
	t.mu.Unlock()
	t.cancel()
	t.wg.Wait()
}
