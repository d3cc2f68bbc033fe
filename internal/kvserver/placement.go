package kvserver

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/allocator"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// Lease placement (docs/design-notes.md, "Lease placement"): the cluster
// setting allocator.LeasePlacement, stored in range 1
// (keys.LeasePlacementKey) and read by every node with the members
// (refreshMembers, every MembersRefreshInterval). balance hands the
// leadership (and with it the lease) of each range this node leads to the
// node preferredLeaderOf names:
//   - spread (the default): the voter at the range's preferred position
//     (preferredLeader), so leases spread over the nodes;
//   - oracle: the node that leads range 1 (the oracle's host), so that a
//     write takes its timestamp without a round trip between nodes; range
//     1 itself keeps its preferred position, and a range the oracle's host
//     holds no voter of, or may not lead (not ACTIVE, not live, its
//     replica damaged), falls back to spread.
// Every node applies the setting it last read; a node that has not read
// the change yet may move a lease back once, until it has. Leadership
// transfers are Raft's, so the setting can cost availability for an
// election at most, never safety.

// leaseState is a node's view of the setting and of the oracle's host.
type leaseState struct {
	// placement: the setting as last read (an allocator.LeasePlacement).
	placement atomic.Value
	// raw: the setting's stored value as last read, so that an unknown
	// value is logged once, not at every read.
	raw atomic.Pointer[string]
	// host: the node that last answered this node as range 1's
	// leaseholder (a timestamp request, fetchTimestamps, or a members
	// request, readMembers), and when. Only range 1's leaseholder answers
	// either, so the answer is first-hand. nil: none yet.
	host atomic.Pointer[oracleAnswer]
	// lastOracle: the oracle's host as the last balance round saw it; a
	// change makes that round a sweep (noteOracleMove).
	lastOracle atomic.Uint64
}

// oracleAnswer is a node that answered as range 1's leaseholder, and when.
type oracleAnswer struct {
	node uint64
	at   time.Time
}

// oracleHostFresh is how long an answer from range 1's leaseholder
// outranks this node's replica of range 1's view of its leader
// (oracleNode): a node that is not range 1's leaseholder reads the members
// from it every MembersRefreshInterval, so the answer is renewed several
// times within it.
func (n *Node) oracleHostFresh() time.Duration {
	return max(10*time.Second, 5*n.cfg.MembersRefreshInterval)
}

// noteOracleHost records that id answered as range 1's leaseholder (this
// node itself: it allocated timestamps as the host).
func (n *Node) noteOracleHost(id uint64) {
	n.leases.host.Store(&oracleAnswer{node: id, at: time.Now()})
}

// forgetOracleHost drops the answer of id, which failed to answer as range
// 1's leaseholder: oracleNode falls back to range 1's replica's view.
func (n *Node) forgetOracleHost(id uint64) {
	if a := n.leases.host.Load(); a != nil && a.node == id {
		n.leases.host.CompareAndSwap(a, nil)
	}
}

// leasePlacement returns the setting as last read (spread until read).
func (n *Node) leasePlacement() allocator.LeasePlacement {
	if p, ok := n.leases.placement.Load().(allocator.LeasePlacement); ok {
		return p
	}
	return allocator.LeasePlacementSpread
}

// setLeasePlacement records the setting read as s. A value this binary
// does not know is logged and taken as the default. A change makes the
// next balance round look at every range (a sweep).
func (n *Node) setLeasePlacement(s string) {
	if last := n.leases.raw.Swap(&s); last != nil && *last == s {
		return
	}
	p, err := allocator.ParseLeasePlacement(s)
	if err != nil {
		n.log.Warn("unknown lease placement setting; placing leases by the default", "err", err)
		p = allocator.LeasePlacementSpread
	}
	if old := n.leasePlacement(); old == p {
		return
	}
	n.leases.placement.Store(p)
	n.activeMu.Lock()
	n.balanceRun = 0 // the next round is a sweep (balance)
	n.activeMu.Unlock()
}

// oracleNode returns the node that holds range 1's lease (the oracle's
// host) as this node knows it: itself if it holds it; else another node
// that answered as its holder within oracleHostFresh and is live; else its
// replica of range 1's view of the leader; else the last other node that
// answered. 0 if none is known.
//
// A first-hand answer outranks the replica's view because the replica
// may have been removed from range 1 without learning it (readMembers):
// its view of the leader is then frozen, and leases placed by it would
// move back and forth between this node's choice and the others'. An
// answer naming this node is not used: r1Leaseholder has just said that
// this node no longer holds range 1's lease.
func (n *Node) oracleNode() uint64 {
	self := n.NodeID()
	if n.r1Leaseholder() != nil {
		return self
	}
	var host uint64
	if a := n.leases.host.Load(); a != nil && a.node != self {
		host = a.node
		if time.Since(a.at) < n.oracleHostFresh() && (n.liveness == nil || n.liveness.isLive(host)) {
			return host
		}
	}
	if l := n.r1Leader(); l != 0 {
		return l
	}
	return host
}

// oraclePlacement reports whether this node carries out the oracle
// placement: the setting as last read, as allocator.AppliedLeasePlacement
// applies it to the cluster's commit protocol.
func (n *Node) oraclePlacement() bool {
	return allocator.AppliedLeasePlacement(n.leasePlacement(), n.commitProtocol().Hierarchy()) == allocator.LeasePlacementOracle
}

// noteOracleMove reports whether the oracle's host, as this node knows it
// (oracleNode), changed since the last call, under the oracle placement:
// balance then looks at every range, so idle ranges follow the host at
// once rather than at the next sweep.
func (n *Node) noteOracleMove() bool {
	if !n.oraclePlacement() {
		return false
	}
	o := n.oracleNode()
	return o != 0 && n.leases.lastOracle.Swap(o) != o
}

// placedLeader is the node the lease placement setting puts d's lease on,
// or 0 where it has no say (spread, range 1, a cluster running a hierarchy
// protocol, the oracle's host unknown, or not a voter of d that may lead
// it): the caller then places by position.
//
// A hierarchy cluster keeps spread whatever the setting: a leaf fences a
// range's commits for a lease duration after its lease moves, and decides
// local transactions where their data is (docs/design-notes.md, "Lease
// placement").
func (n *Node) placedLeader(d *rpcpb.RangeDescriptor, ok func(nodeID uint64) bool) uint64 {
	if !n.oraclePlacement() || d.RangeId == OracleRangeID {
		return 0
	}
	o := n.oracleNode()
	if o == 0 || !slices.Contains(voters(d), o) || !ok(o) {
		return 0
	}
	return o
}
