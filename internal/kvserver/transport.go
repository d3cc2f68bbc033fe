package kvserver

import (
	"context"
	"sync"
	"time"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"go.etcd.io/raft/v3/raftpb"
)

// Limits of the Raft transport.
const (
	// PeerQueueMessagesMax bounds the messages queued for one peer; more
	// are dropped (Raft retransmits) and the peer reported unreachable.
	PeerQueueMessagesMax = 4096
	// PeerBatchMessagesMax bounds the messages sent in one RPC.
	PeerBatchMessagesMax = 256
	// RaftSendTimeout bounds one send RPC.
	RaftSendTimeout = 10 * time.Second
)

// LinkFault is injected on the link to one peer (there is no netem here):
// every message arrives Delay later than sent (a one-way delay: messages
// still pipeline, in order), or is dropped when Drop is set.
type LinkFault struct {
	Delay time.Duration
	Drop  bool
}

// PeerDelayedBatchesMax bounds the batches in a link's delay line.
const PeerDelayedBatchesMax = 1024

type delayedBatch struct {
	due   time.Time
	batch []*rpcpb.RaftMessage
}

// transport sends Raft messages to peers, one queue and one sender
// goroutine per peer, so a slow peer delays no other.
type transport struct {
	n  *Node
	mu struct {
		sync.Mutex
		peers  map[uint64]*peer
		faults map[uint64]LinkFault
	}
	stopc chan struct{}
	wg    sync.WaitGroup
}

type peer struct {
	nodeID uint64
	ch     chan *rpcpb.RaftMessage
}

func newTransport(n *Node) *transport {
	t := &transport{n: n, stopc: make(chan struct{})}
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

// Send implements replica.Transport.
func (t *transport) Send(rangeID uint64, msgs []raftpb.Message) {
	for i := range msgs {
		m := &msgs[i]
		data, err := m.Marshal()
		if err != nil {
			panic(err)
		}
		p := t.peer(m.To)
		if p == nil {
			t.n.reportUnreachable(rangeID, m)
			continue
		}
		select {
		case p.ch <- &rpcpb.RaftMessage{RangeId: rangeID, FromNodeId: m.From, ToNodeId: m.To, Message: data}:
		default:
			t.n.reportUnreachable(rangeID, m)
		}
	}
}

func (t *transport) peer(nodeID uint64) *peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.mu.peers[nodeID]; p != nil {
		return p
	}
	select {
	case <-t.stopc:
		return nil
	default:
	}
	if t.n.nodeAddress(nodeID) == "" {
		return nil
	}
	p := &peer{nodeID: nodeID, ch: make(chan *rpcpb.RaftMessage, PeerQueueMessagesMax)}
	t.mu.peers[nodeID] = p
	t.wg.Add(1)
	go t.run(p)
	return p
}

func (t *transport) run(p *peer) {
	defer t.wg.Done()
	// The delay line: batches wait here until due, in order, while the
	// loop below keeps collecting.
	delayed := make(chan delayedBatch, PeerDelayedBatchesMax)
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for {
			select {
			case <-t.stopc:
				return
			case db := <-delayed:
				select {
				case <-time.After(time.Until(db.due)):
				case <-t.stopc:
					return
				}
				if err := t.sendBatch(p, db.batch); err != nil {
					t.failBatch(db.batch)
				}
			}
		}
	}()
	for {
		var batch []*rpcpb.RaftMessage
		select {
		case <-t.stopc:
			return
		case m := <-p.ch:
			batch = append(batch, m)
		}
	fill:
		for len(batch) < PeerBatchMessagesMax {
			select {
			case m := <-p.ch:
				batch = append(batch, m)
			default:
				break fill
			}
		}
		f := t.fault(p.nodeID)
		switch {
		case f.Drop:
			t.failBatch(batch)
		case f.Delay > 0:
			select {
			case delayed <- delayedBatch{due: time.Now().Add(f.Delay), batch: batch}:
			default:
				t.failBatch(batch) // the delay line is full
			}
		default:
			if err := t.sendBatch(p, batch); err != nil {
				t.failBatch(batch)
			}
		}
	}
}

func (t *transport) sendBatch(p *peer, batch []*rpcpb.RaftMessage) error {
	cl, err := t.n.internalClient(p.nodeID)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), RaftSendTimeout)
	defer cancel()
	_, err = cl.Raft(ctx, &rpcpb.RaftMessageBatch{Messages: batch})
	return err
}

func (t *transport) failBatch(batch []*rpcpb.RaftMessage) {
	for _, rm := range batch {
		var m raftpb.Message
		if m.Unmarshal(rm.Message) == nil {
			t.n.reportUnreachable(rm.RangeId, &m)
		}
	}
}

func (t *transport) stop() {
	close(t.stopc)
	t.wg.Wait()
}
