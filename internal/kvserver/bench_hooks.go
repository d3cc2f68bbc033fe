package kvserver

import (
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// leaderPreference is the node ID every range should be led by, 0 for
// none (Node.SetLeaderPreference).
type leaderPreference struct{ atomic.Uint64 }

// SetLeaderPreference makes balance hand the leadership (and with it the
// lease) of every range this node leads and nodeID holds a replica of to
// nodeID, instead of spreading leaders by range ID (preferredLeader); 0
// goes back to spreading. Set it on every node: only a range's current
// leader moves it. The next balance round looks at every replica, quiescent
// or not.
//
// It exists for benchmarks that reproduce a setting where every leaseholder
// is co-located with the client's gateway node (canopy bench pipeline, after
// the transactional pipelining post). A node that restarts forgets it.
func (n *Node) SetLeaderPreference(nodeID uint64) {
	n.leaderPreference.Store(nodeID)
	n.activeMu.Lock()
	n.balanceRun = 0 // the next round is a sweep (balance)
	n.activeMu.Unlock()
}

// preferredLeaderOf is the node that should lead d: the leader preference
// if it holds a replica of d, else the node the lease placement setting
// names (placement.go), else preferredLeader(d), each among the nodes that
// may lead.
func (n *Node) preferredLeaderOf(d *rpcpb.RangeDescriptor) uint64 {
	if p := n.leaderPreference.Load(); p != 0 {
		for _, r := range d.Replicas {
			if r.NodeId == p {
				return p
			}
		}
	}
	ok := n.mayLead(d)
	if p := n.placedLeader(d, ok); p != 0 {
		return p
	}
	return preferredLeaderAmong(d, ok)
}

// mayLead accepts the nodes that may hold d's lease: leases go to nodes
// that stay, ACTIVE and live (replicate.go), whose replica of d is not
// damaged (damage.go).
func (n *Node) mayLead(d *rpcpb.RangeDescriptor) func(nodeID uint64) bool {
	self := n.NodeID()
	return func(id uint64) bool {
		return n.membership(id) == rpcpb.NodeMembership_ACTIVE && (id == self || n.liveness == nil || n.liveness.isLive(id)) &&
			!n.isDamaged(d, id)
	}
}

// ReadIndexRounds sums the ReadIndex rounds that callers waited for
// (replica.Replica.ReadIndexRounds) over this node's replicas, and gives
// the oracle's range (OracleRangeID) apart: oracle counts the rounds its
// timestamps waited for to confirm leadership when the lease of range 1
// had lapsed. For benchmarks (canopy bench pipeline).
func (n *Node) ReadIndexRounds() (all, oracle uint64) {
	for _, rr := range n.replicaList() {
		c := rr.r.ReadIndexRounds()
		all += c
		if rr.r.RangeID() == OracleRangeID {
			oracle += c
		}
	}
	return all, oracle
}

// LinkDelays returns the Raft batches this node's transport held for an
// injected link delay (SetLinkFault) and the time they were held in fact,
// summed: the realized delay, which Go's timers make longer than the one
// asked for. For benchmarks (canopy bench pipeline).
func (n *Node) LinkDelays() (batches int64, held time.Duration) {
	return n.transport.delayed.load()
}
