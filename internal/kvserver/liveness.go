package kvserver

import "sync"

// liveness records when this node last heard from each peer, in ticks of
// the node's tick loop, so that quiesced ranges notice a dead node.
//
// Every LivenessBeatTicks ticks the transport sends each peer one batch,
// an empty one if it had nothing else to send since the last beat
// (transport.beat): at most one message per pair of nodes per beat,
// whatever the number of ranges between them. This is the
// coalesced heartbeat: the Raft heartbeats of quiesced ranges stop, and
// this one message stands for all of them. A peer not heard from for
// ElectionTicks ticks is not live; then every quiesced replica whose
// leader is on that peer, or which leads with a follower there, is woken
// (Node.tick) and Raft's election and CheckQuorum take over as usual.
//
// Rejected: CockroachDB's liveness records in a replicated range with
// epochs. Canopy's leases come from ReadIndex rounds, not from liveness,
// so liveness here decides nothing about safety: a wrong verdict only
// wakes ranges (costing CPU) or leaves them asleep a little longer
// (costing availability, bounded by ElectionTicks).
type liveness struct {
	// deadTicks: a peer silent for this many ticks is not live.
	deadTicks uint64
	mu        struct {
		sync.Mutex
		// now is the tick count. heard[id] is the tick at which a batch
		// from id last arrived; a peer never heard from counts as heard at
		// tick 0 (the node's start), so that it is given ElectionTicks to
		// show up.
		now   uint64
		heard map[uint64]uint64
	}
}

func newLiveness(deadTicks int) *liveness {
	l := &liveness{deadTicks: uint64(deadTicks)}
	l.mu.heard = map[uint64]uint64{}
	return l
}

// heardFrom records a batch from nodeID.
func (l *liveness) heardFrom(nodeID uint64) {
	if nodeID == 0 {
		return
	}
	l.mu.Lock()
	l.mu.heard[nodeID] = l.mu.now
	l.mu.Unlock()
}

// tick advances the clock by one tick.
func (l *liveness) tick() {
	l.mu.Lock()
	l.mu.now++
	l.mu.Unlock()
}

// isLive reports whether nodeID was heard from in the last deadTicks
// ticks.
func (l *liveness) isLive(nodeID uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.now-l.mu.heard[nodeID] < l.deadTicks
}

// silentTicks returns how many ticks ago nodeID was last heard from.
func (l *liveness) silentTicks(nodeID uint64) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.now - l.mu.heard[nodeID]
}

// dead returns the peers among ids that are not live (nil if none).
func (l *liveness) dead(ids []uint64) map[uint64]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out map[uint64]bool
	for _, id := range ids {
		if l.mu.now-l.mu.heard[id] >= l.deadTicks {
			if out == nil {
				out = map[uint64]bool{}
			}
			out[id] = true
		}
	}
	return out
}
