package kvserver

import (
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"go.etcd.io/raft/v3/raftpb"
)

// SetTestingHooks sets testingHooks (testing_hooks.go) until restore is
// called. Call it before any node starts.
func SetTestingHooks(descLoaded func(n *Node, rangeID uint64, desc *rpcpb.RangeDescriptor), beforeSplit func(n *Node, rightID uint64)) (restore func()) {
	old := testingHooks
	testingHooks.descLoaded, testingHooks.beforeSplit = descLoaded, beforeSplit
	return func() { testingHooks = old }
}

// SetDropRaft sets testingHooks.dropRaft until restore is called. Call it
// before any node starts.
func SetDropRaft(drop func(n *Node, rangeID uint64) bool) (restore func()) {
	old := testingHooks.dropRaft
	testingHooks.dropRaft = drop
	return func() { testingHooks.dropRaft = old }
}

// SetFeedStep sets testingHooks.feedStep until restore is called. Call
// it before any node starts.
func SetFeedStep(hook func(n *Node, rangeID uint64, step string)) (restore func()) {
	old := testingHooks.feedStep
	testingHooks.feedStep = hook
	return func() { testingHooks.feedStep = old }
}

// MembershipOf is n's view of node id's membership.
func (n *Node) MembershipOf(id uint64) rpcpb.NodeMembership { return n.membership(id) }

// ReplicaState reports whether n has a replica of rangeID, and whether it
// is quiescent.
func (n *Node) ReplicaState(rangeID uint64) (exists, quiescent bool) {
	rr := n.replica(rangeID)
	if rr == nil {
		return false, false
	}
	return true, rr.r.Quiescent()
}

// RangeDescOf is n's descriptor of rangeID, nil if it has no replica.
func (n *Node) RangeDescOf(rangeID uint64) *rpcpb.RangeDescriptor {
	rr := n.replica(rangeID)
	if rr == nil {
		return nil
	}
	return rr.sm.Desc()
}

// HeartbeatAfterRemoval removes n's replica of rangeID, then hands the
// removed replica a heartbeat whose commit lies beyond any log, as a
// heartbeat that found the replica in the node's map just before its
// removal would be. It reports whether the heartbeat would be stepped.
func (n *Node) HeartbeatAfterRemoval(rangeID uint64) (stepped bool) {
	rr := n.replica(rangeID)
	n.removeReplica(rr, nil, "test")
	m := raftpb.Message{Type: raftpb.MsgHeartbeat, To: rr.peer, Commit: 1 << 40}
	return n.checkHeartbeatCommit(rr, &m)
}
