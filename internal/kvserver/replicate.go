package kvserver

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/canopy-db/canopy/internal/allocator"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// The replicate queue: each leaseholder, in its balance rounds, asks the
// allocator (internal/allocator) for the next step of every range it
// leads and takes it (change_replicas.go): replacing replicas on dead,
// decommissioning and removed nodes, filling ranges short of voters,
// removing extra ones, and moving replicas to nodes with fewer (count
// based rebalancing). The leases follow the replicas: balance hands a
// range's lease to its preferred leader (preferredLeader), a position in
// the descriptor's list that a promoted replica takes over from the one
// it replaces.
//
// A round looks at the ranges that were active since the last one, as
// balance does, unless the cluster has work for the queue (a node that is
// not ACTIVE, a node that is not live, a replica change under way, or
// replica counts apart by the rebalance threshold): then at every range
// the node leads. It makes at most Config.ReplicateChangesMax changes.

// DefaultReplicateChangesMax is the default of
// Config.ReplicateChangesMax.
const DefaultReplicateChangesMax = 4

// replicateState is what the replicate queue remembers between rounds
// (only the balance loop uses it).
type replicateState struct {
	// membersAt is the members snapshot the counts below build on; delta
	// are the changes to replica counts this node made since (the next
	// snapshot includes them).
	membersAt time.Time
	delta     map[uint64]int
	// gcChecked: when maybeGCReplica last asked about a range.
	gcChecked map[uint64]time.Time
	// learnerSince: since when the learner on a node (by range, node) has
	// been seen not ready (stuckLearners).
	learnerSince map[[2]uint64]time.Time
}

// LearnerCatchUpMax bounds how long the replicate queue waits for a
// learner to take appends (its snapshot applied): past it, the learner is
// removed and a replica is added again later (the allocator's
// LearnersStuck), so a learner whose snapshot keeps failing does not hold
// the range's replica changes forever. A var for tests.
var LearnerCatchUpMax = 5 * time.Minute

// stuckLearners returns the nodes of d's learners not ready (st, as the
// leader sees them) for longer than LearnerCatchUpMax.
func (n *Node) stuckLearners(d *rpcpb.RangeDescriptor, st replica.Status) []uint64 {
	if n.replicate.learnerSince == nil {
		n.replicate.learnerSince = map[[2]uint64]time.Time{}
	}
	now := time.Now()
	var out []uint64
	for _, rd := range d.Replicas {
		k := [2]uint64{d.RangeId, rd.NodeId}
		if rd.Type != rpcpb.ReplicaType_LEARNER || slices.Contains(st.LearnersReplicating, rd.NodeId) {
			delete(n.replicate.learnerSince, k)
			continue
		}
		since, ok := n.replicate.learnerSince[k]
		if !ok {
			n.replicate.learnerSince[k] = now
			continue
		}
		if now.Sub(since) > LearnerCatchUpMax {
			out = append(out, rd.NodeId)
			delete(n.replicate.learnerSince, k)
		}
	}
	return out
}

// ReplicaGCCheckInterval bounds how often a replica that knows no leader
// asks range 1 whether it is still a member (maybeGCReplica).
const ReplicaGCCheckInterval = 10 * time.Second

// A quiescent follower removed from its range without learning it (the
// entry that removed it never reached it, and its leader no longer sends
// to it) keeps knowing a live leader and is never ticked: it would sit
// there for ever, with its data. The balance sweep looks up at most
// ReplicaGCQuiescentMax quiescent followers per sweep, each at most every
// ReplicaGCQuiescentInterval (CockroachDB's replica GC queue checks
// inactive replicas the same way, every 12 hours). A node with a replica
// of range 1 reads the meta record from it, maybe stale, at no cost to
// range 1: a stale record can only be older, so one that leaves the
// replica out is proof enough. Vars for tests.
var (
	ReplicaGCQuiescentInterval = 10 * time.Minute
	ReplicaGCQuiescentMax      = 8
)

// maybeGCReplica removes rr, a replica that knows no leader or a
// quiescent follower, if the range's meta record shows it was removed: a
// newer generation without it. It asks range 1 about rr's range at most
// once per every (per range), and reports whether it asked, and whether
// it had an answer. stale: read the record from this node's replica of
// range 1 if it has one (the sweep of quiescent followers), except for
// range 1's own replica, which could be the stale one. A replica learns
// its removal by applying it; one cut off or down meanwhile never does,
// and would campaign forever, or, quiescent, sit there forever
// (CockroachDB's replica GC queue does this).
func (n *Node) maybeGCReplica(rr *rangeReplica, d *rpcpb.RangeDescriptor, every time.Duration, stale bool) (asked, answered bool) {
	if n.replicate.gcChecked == nil {
		n.replicate.gcChecked = map[uint64]time.Time{}
	}
	now := time.Now()
	if t, ok := n.replicate.gcChecked[d.RangeId]; ok && now.Sub(t) < every {
		return false, false
	}
	n.replicate.gcChecked[d.RangeId] = now
	var meta *rpcpb.RangeDescriptor
	if stale && d.RangeId != OracleRangeID && n.replica(OracleRangeID) != nil {
		if meta = n.lookupMetaStale(d.StartKey); meta == nil {
			return true, true
		}
	} else {
		ctx, cancel := context.WithTimeout(n.stopCtx, n.electionTimeout())
		defer cancel()
		var e *rpcpb.Error
		if meta, e = n.lookupMeta(ctx, d.StartKey); e != nil {
			return true, false
		}
	}
	if meta.RangeId != d.RangeId || meta.Generation <= d.Generation {
		return true, true
	}
	if me := replicaOn(meta, n.NodeID()); me != nil && peerID(me) == rr.peer {
		return true, true
	}
	n.removeReplica(rr, meta, "removed from the range (meta record of generation "+strconv.FormatUint(meta.Generation, 10)+")")
	return true, true
}

// allocatorNodes builds the allocator's view of the nodes, and reports
// whether the cluster has work for the replicate queue. ok is false while
// the members are not known yet.
func (n *Node) allocatorNodes() (nodes map[uint64]allocator.Node, busy, ok bool) {
	ms, at := n.membersSnapshot()
	if len(ms) == 0 {
		return nil, false, false
	}
	if at != n.replicate.membersAt {
		n.replicate.membersAt, n.replicate.delta = at, map[uint64]int{}
	}
	self := n.NodeID()
	tick := n.cfg.TickInterval
	nodes = make(map[uint64]allocator.Node, len(ms))
	lo, hi := -1, -1
	for id, m := range ms {
		an := allocator.Node{ID: id, Replicas: int(m.Replicas) + n.replicate.delta[id]}
		switch m.Node.GetMembership() {
		case rpcpb.NodeMembership_DECOMMISSIONING:
			an.Membership = allocator.Decommissioning
		case rpcpb.NodeMembership_REMOVED:
			an.Membership = allocator.Removed
		}
		an.Live = id == self || n.liveness.isLive(id)
		an.Dead = !an.Live && time.Duration(n.liveness.silentTicks(id))*tick >= n.cfg.DeadNodeTimeout
		if an.Membership == allocator.Removed && m.Replicas == 0 {
			continue // gone for good
		}
		nodes[id] = an
		if an.Membership != allocator.Active || !an.Live {
			busy = true
			continue
		}
		if lo < 0 || an.Replicas < lo {
			lo = an.Replicas
		}
		hi = max(hi, an.Replicas)
	}
	if hi-lo >= 2 {
		busy = true
	}
	return nodes, busy, true
}

// allocatorRange builds the allocator's view of a range rr leads.
func allocatorRange(self uint64, d *rpcpb.RangeDescriptor, st replica.Status) allocator.Range {
	r := allocator.Range{Leaseholder: self, LearnersReady: st.LearnersReplicating, CaughtUp: st.CaughtUp}
	for _, rd := range d.Replicas {
		k := allocator.Voter
		switch rd.Type {
		case rpcpb.ReplicaType_LEARNER:
			k = allocator.Learner
		case rpcpb.ReplicaType_VOTER_INCOMING:
			k = allocator.VoterIncoming
		case rpcpb.ReplicaType_VOTER_OUTGOING:
			k = allocator.VoterOutgoing
		}
		r.Replicas = append(r.Replicas, allocator.Replica{NodeID: rd.NodeId, Kind: k})
	}
	return r
}

// replicateRange asks the allocator for rr's next step and takes it. It
// reports whether it changed something (a replica change or a lease
// transfer).
func (n *Node) replicateRange(rr *rangeReplica, nodes map[uint64]allocator.Node) bool {
	st := rr.r.Status()
	d := rr.sm.Desc()
	if !st.Leaseholder || d == nil {
		return false
	}
	rf := int(n.settings().GetReplicationFactor())
	ar := allocatorRange(n.NodeID(), d, st)
	damaged := n.damage.damagedPeer(d.RangeId)
	for i, rd := range d.Replicas {
		if (damaged != 0 && peerID(rd) == damaged) || (rd.NodeId == n.NodeID() && rr.damaged.Load()) {
			ar.Replicas[i].Damaged = true // damage.go
		}
	}
	ar.LearnersStuck = n.stuckLearners(d, st)
	a := allocator.Decide(ar, nodes, allocator.Config{ReplicationFactor: rf})
	var next *rpcpb.RangeDescriptor
	switch a.Kind {
	case allocator.None:
		return false
	case allocator.TransferLease:
		n.log.Info("replicate queue: moving the lease", "range", d.RangeId, "to", a.Target, "why", a.Reason)
		rr.r.TransferLeader(a.Target)
		return true
	case allocator.LeaveJoint:
		next = withoutJoint(d)
	case allocator.AddLearner:
		next = withLearner(d, a.Target)
		n.replicate.delta[a.Target]++
	case allocator.Promote:
		next = withPromotion(d, a.Target, a.Remove)
		if a.Remove != 0 {
			n.replicate.delta[a.Remove]--
		}
	case allocator.RemoveLearner, allocator.RemoveVoter:
		next = without(d, a.Target)
		n.replicate.delta[a.Target]--
	}
	n.log.Info("replicate queue", "range", d.RangeId, "step", a.String())
	ctx, cancel := context.WithTimeout(n.stopCtx, n.cfg.RequestTimeout)
	defer cancel()
	nd, err := n.changeReplicas(ctx, rr, d, next)
	if err != nil {
		if !errors.Is(err, replica.ErrNotLeader) {
			n.log.Warn("replicate queue: replica change failed (tried again later)", "range", d.RangeId, "step", a.String(), "err", err)
		}
		return true
	}
	if len(confStateOf(nd).VotersOutgoing) > 0 {
		// Leave the joint configuration at once: it needs both majorities.
		if _, err := n.changeReplicas(ctx, rr, nd, withoutJoint(nd)); err != nil {
			n.log.Warn("replicate queue: leaving the joint configuration failed (tried again later)", "range", d.RangeId, "err", err)
		}
	}
	return true
}

// replicateRound runs the replicate queue over reps (the ranges balance
// looks at this round), or over every replica if the cluster has work for
// it. It returns how many changes it made.
func (n *Node) replicateRound(reps []*rangeReplica) int {
	nodes, busy, ok := n.allocatorNodes()
	if !ok {
		return 0
	}
	if busy {
		reps = n.replicaList()
	}
	made := 0
	for _, rr := range reps {
		if made >= n.cfg.ReplicateChangesMax {
			break
		}
		if n.replicateRange(rr, nodes) {
			made++
		}
	}
	return made
}
