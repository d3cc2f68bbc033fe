package kvserver

import (
	"slices"
	"sync/atomic"

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
	// oracleHost: the node that last answered a timestamp request of this
	// node (fetchTimestamps), for nodes without a replica of range 1.
	oracleHost atomic.Uint64
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

// oracleNode returns the node that leads range 1 as this node knows it:
// its replica of range 1's view, else the node that last served it
// timestamps; 0 if neither is known.
func (n *Node) oracleNode() uint64 {
	if l := n.r1Leader(); l != 0 {
		return l
	}
	return n.leases.oracleHost.Load()
}

// placedLeader is the node the lease placement setting puts d's lease on,
// or 0 where it has no say (spread, range 1, the oracle's host unknown,
// or not a voter of d that may lead it): the caller then places by
// position.
func (n *Node) placedLeader(d *rpcpb.RangeDescriptor, ok func(nodeID uint64) bool) uint64 {
	if n.leasePlacement() != allocator.LeasePlacementOracle || d.RangeId == OracleRangeID {
		return 0
	}
	o := n.oracleNode()
	if o == 0 || !slices.Contains(voters(d), o) || !ok(o) {
		return 0
	}
	return o
}
