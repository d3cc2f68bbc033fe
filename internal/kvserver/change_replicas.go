package kvserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"go.etcd.io/raft/v3/confchange"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// Replica changes (membership changes of one range).
//
// A range's replicas change one step at a time, each step one Raft
// configuration change (etcd raft's ConfChangeV2) that carries the range's
// next descriptor in its Context (ChangeReplicasCommand). When the entry
// applies, every replica checks that its descriptor still has the
// expected generation and, if so, installs the new descriptor (generation
// + 1) in the same engine batch as the configuration (replica.
// ConfChangeStateMachine); otherwise the change is refused everywhere
// alike and Raft applies the empty change (I5). The leaseholder proposes
// under a write latch over the whole range, so that every write evaluated
// under the old generation applies first and none is refused for it.
//
// The steps, as the replicate queue (replicate.go) takes them, after
// CockroachDB's replicate queue:
//
//  1. add a LEARNER on the target node: it votes in nothing while Raft
//     sends it a snapshot and then the log;
//  2. once the learner takes appends, promote it: alone (a simple change)
//     when a voter is missing, or swapped for the voter to remove in one
//     joint configuration (VOTER_INCOMING + VOTER_OUTGOING: joint
//     consensus, so the range never passes through an even number of
//     voters or a smaller quorum);
//  3. leave the joint configuration (the outgoing voter is gone).
//
// A replica that applies a descriptor without itself stops and removes
// its state, leaving a tombstone (removeReplica). The leaseholder never
// removes its own replica: it hands its lease over first.
//
// Every replica ever added to a range gets a new replica ID
// (RangeDescriptor.next_replica_id), so a replica added back to a node
// never reuses the Raft state of one removed there (replica/peer.go).

// changeResult is the result of a replica change that applied.
type changeResult struct{ desc *rpcpb.RangeDescriptor }

// ApplyConfChange implements replica.ConfChangeStateMachine.
func (s *rangeSM) ApplyConfChange(b *storage.Batch, index, term uint64, cc raftpb.ConfChangeV2, cmd []byte) (bool, any, func()) {
	refuse := func(format string, args ...any) (bool, any, func()) {
		return false, &rpcpb.BatchResponse{Error: pbErr(rpcpb.ErrorCode_RANGE_KEY_MISMATCH, format, args...)}, nil
	}
	s.keys.forget() // keystates.go: any command but a write batch
	var c rpcpb.ChangeReplicasCommand
	if err := proto.Unmarshal(cmd, &c); err != nil || c.Desc == nil {
		return refuse("r%d: configuration change at index %d carries no descriptor", s.rangeID, index)
	}
	desc := s.Desc()
	nd := c.Desc
	switch {
	case desc == nil:
		return refuse("r%d is not initialized", s.rangeID)
	case desc.Generation != c.ExpectedGeneration:
		return refuse("r%d changed (generation %d, change made for %d) before the replica change applied", s.rangeID, desc.Generation, c.ExpectedGeneration)
	case nd.RangeId != desc.RangeId || nd.Generation != desc.Generation+1 ||
		!bytes.Equal(nd.StartKey, desc.StartKey) || !bytes.Equal(nd.EndKey, desc.EndKey):
		return refuse("r%d: the replica change's descriptor does not follow generation %d", s.rangeID, desc.Generation)
	}
	if err := writeDesc(b, nd); err != nil {
		panic(err)
	}
	after := func() {
		s.setDesc(nd)
		if h, ok := s.n.(interface {
			replicasChanged(rangeID uint64, d *rpcpb.RangeDescriptor)
		}); ok {
			h.replicasChanged(s.rangeID, nd)
		}
	}
	return true, changeResult{desc: nd}, after
}

// confChangeFor returns the Raft configuration change that takes a range
// from old to next, and checks, with etcd raft's own confchange package,
// that it leads exactly to next's configuration.
func confChangeFor(old, next *rpcpb.RangeDescriptor) (raftpb.ConfChangeV2, error) {
	var cc raftpb.ConfChangeV2
	oldCS, nextCS := confStateOf(old), confStateOf(next)
	leaving := len(oldCS.VotersOutgoing) > 0
	if !leaving {
		before := map[uint64]*rpcpb.ReplicaDescriptor{}
		for _, r := range old.Replicas {
			before[peerID(r)] = r
		}
		after := map[uint64]bool{}
		for _, r := range next.Replicas {
			id := peerID(r)
			after[id] = true
			was := before[id]
			switch {
			case r.Type == rpcpb.ReplicaType_LEARNER && was == nil:
				cc.Changes = append(cc.Changes, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddLearnerNode, NodeID: id})
			case r.Type == rpcpb.ReplicaType_LEARNER:
				return cc, fmt.Errorf("r%d: replica %d cannot become a learner (demotions are not made)", old.RangeId, id)
			case r.Type == rpcpb.ReplicaType_VOTER_OUTGOING:
				cc.Changes = append(cc.Changes, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeRemoveNode, NodeID: id})
			case was == nil || was.Type == rpcpb.ReplicaType_LEARNER:
				cc.Changes = append(cc.Changes, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeAddNode, NodeID: id})
			}
		}
		for id := range before {
			if !after[id] {
				cc.Changes = append(cc.Changes, raftpb.ConfChangeSingle{Type: raftpb.ConfChangeRemoveNode, NodeID: id})
			}
		}
		if len(cc.Changes) == 0 {
			return cc, fmt.Errorf("r%d: the replica change changes nothing", old.RangeId)
		}
		if len(nextCS.VotersOutgoing) > 0 {
			cc.Transition = raftpb.ConfChangeTransitionJointExplicit
		}
	}
	// Check the outcome with Raft's own rules.
	chg := confchange.Changer{Tracker: tracker.MakeProgressTracker(1, 0), LastIndex: 1}
	cfg, prs, err := confchange.Restore(chg, oldCS)
	if err != nil {
		return cc, fmt.Errorf("r%d: current configuration: %w", old.RangeId, err)
	}
	chg.Tracker.Config, chg.Tracker.Progress = cfg, prs
	switch {
	case leaving:
		cfg, prs, err = chg.LeaveJoint()
	case cc.Transition == raftpb.ConfChangeTransitionJointExplicit:
		cfg, prs, err = chg.EnterJoint(false, cc.Changes...)
	default:
		cfg, prs, err = chg.Simple(cc.Changes...)
	}
	if err != nil {
		return cc, fmt.Errorf("r%d: %w", old.RangeId, err)
	}
	chg.Tracker.Config, chg.Tracker.Progress = cfg, prs
	if err := chg.Tracker.ConfState().Equivalent(nextCS); err != nil {
		return cc, fmt.Errorf("r%d: the change does not lead to the new descriptor's configuration: %w", old.RangeId, err)
	}
	return cc, nil
}

// changeReplicas replaces rr's descriptor old with next (same span,
// generation + 1, one configuration step away) at the leaseholder, and
// updates the meta record. It returns the descriptor that applied.
func (n *Node) changeReplicas(ctx context.Context, rr *rangeReplica, old, next *rpcpb.RangeDescriptor) (*rpcpb.RangeDescriptor, error) {
	next.Generation = old.Generation + 1
	cc, err := confChangeFor(old, next)
	if err != nil {
		return nil, err
	}
	cmd, err := proto.Marshal(&rpcpb.ChangeReplicasCommand{ExpectedGeneration: old.Generation, Desc: next})
	if err != nil {
		return nil, err
	}
	if !rr.r.Status().Leaseholder {
		return nil, replica.ErrNotLeader
	}
	// As a split: writes in flight apply first, none evaluates under the
	// old generation while the change is in flight.
	g, err := rr.latches.Acquire(ctx, []concurrency.LatchSpan{{Span: concurrency.Span{Key: old.StartKey, EndKey: old.EndKey}, Access: concurrency.Write}})
	if err != nil {
		return nil, err
	}
	res, err := rr.r.ProposeConfChange(ctx, cc, cmd)
	rr.latches.Release(g)
	if err != nil {
		return nil, err
	}
	switch r := res.(type) {
	case changeResult:
		n.log.Info("replicas changed", "range", old.RangeId, "from", describeReplicas(old), "to", describeReplicas(r.desc))
		if err := n.ensureMeta(ctx, r.desc); err != nil {
			n.log.Warn("meta update after a replica change", "range", r.desc.RangeId, "err", err)
		}
		return r.desc, nil
	case *rpcpb.BatchResponse:
		return nil, errorf(r.Error)
	}
	return nil, fmt.Errorf("r%d: unexpected result %T of a replica change", old.RangeId, res)
}

// describeReplicas prints a descriptor's replicas for logs: n1,n2,n4(learner).
func describeReplicas(d *rpcpb.RangeDescriptor) string {
	var b bytes.Buffer
	for i, r := range d.Replicas {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "n%d", r.NodeId)
		switch r.Type {
		case rpcpb.ReplicaType_LEARNER:
			b.WriteString("(learner)")
		case rpcpb.ReplicaType_VOTER_INCOMING:
			b.WriteString("(incoming)")
		case rpcpb.ReplicaType_VOTER_OUTGOING:
			b.WriteString("(outgoing)")
		}
	}
	return b.String()
}

// withReplica returns a copy of d with a learner added on nodeID (a new
// replica ID).
func withLearner(d *rpcpb.RangeDescriptor, nodeID uint64) *rpcpb.RangeDescriptor {
	nd := proto.Clone(d).(*rpcpb.RangeDescriptor)
	rid := max(nd.NextReplicaId, 1)
	nd.NextReplicaId = rid + 1
	nd.Replicas = append(nd.Replicas, &rpcpb.ReplicaDescriptor{NodeId: nodeID, ReplicaId: rid, Type: rpcpb.ReplicaType_LEARNER})
	return nd
}

// withPromotion returns a copy of d with the learner on learnerNode made a
// voter and, if removeNode is not 0, the voter there removed: in a joint
// configuration (incoming and outgoing) if both, else in one step. The
// promoted replica takes the removed one's place in the list, so that it
// is the preferred leader of the same ranges (preferredLeader).
func withPromotion(d *rpcpb.RangeDescriptor, learnerNode, removeNode uint64) *rpcpb.RangeDescriptor {
	nd := proto.Clone(d).(*rpcpb.RangeDescriptor)
	var promoted *rpcpb.ReplicaDescriptor
	li, ri := -1, -1
	for i, r := range nd.Replicas {
		switch r.NodeId {
		case learnerNode:
			promoted, li = r, i
		case removeNode:
			ri = i
		}
	}
	if promoted == nil {
		return nd
	}
	if ri < 0 {
		promoted.Type = rpcpb.ReplicaType_VOTER
		return nd
	}
	promoted.Type = rpcpb.ReplicaType_VOTER_INCOMING
	nd.Replicas[ri].Type = rpcpb.ReplicaType_VOTER_OUTGOING
	// The incoming replica takes the outgoing one's slot.
	nd.Replicas[li], nd.Replicas[ri] = nd.Replicas[ri], nd.Replicas[li]
	// For about one swap in every number of voters (by range and replica
	// ID, so every replica computes the same), the incoming replica takes
	// the slot of the preferred leader (preferredLeader) instead, and
	// trades places with the voter there: so leases, and not only
	// replicas, move onto a node added to the cluster. Without it the
	// preferred slot only changed hands when its own voter was replaced,
	// which rebalancing never picks (the lease's voter goes last), and an
	// added node got replicas but no lease.
	var vs []int // indexes in nd.Replicas of the voters once the swap is done
	for i, r := range nd.Replicas {
		if r.Type != rpcpb.ReplicaType_LEARNER && r.Type != rpcpb.ReplicaType_VOTER_OUTGOING {
			vs = append(vs, i)
		}
	}
	if nv := uint64(len(vs)); nv > 1 && (d.RangeId+promoted.ReplicaId)%nv == 0 {
		pi := vs[d.RangeId%nv]
		nd.Replicas[ri], nd.Replicas[pi] = nd.Replicas[pi], nd.Replicas[ri]
	}
	return nd
}

// withoutJoint returns a copy of d after leaving its joint configuration.
func withoutJoint(d *rpcpb.RangeDescriptor) *rpcpb.RangeDescriptor {
	nd := proto.Clone(d).(*rpcpb.RangeDescriptor)
	var out []*rpcpb.ReplicaDescriptor
	for _, r := range nd.Replicas {
		switch r.Type {
		case rpcpb.ReplicaType_VOTER_OUTGOING:
			continue
		case rpcpb.ReplicaType_VOTER_INCOMING:
			r.Type = rpcpb.ReplicaType_VOTER
		}
		out = append(out, r)
	}
	nd.Replicas = out
	return nd
}

// without returns a copy of d without its replica on nodeID.
func without(d *rpcpb.RangeDescriptor, nodeID uint64) *rpcpb.RangeDescriptor {
	nd := proto.Clone(d).(*rpcpb.RangeDescriptor)
	var out []*rpcpb.ReplicaDescriptor
	for _, r := range nd.Replicas {
		if r.NodeId != nodeID {
			out = append(out, r)
		}
	}
	nd.Replicas = out
	return nd
}

// Replica removal and tombstones.

// tombstoneKey holds, for a range this node held a replica of and no
// longer does, the lowest replica ID a replica of it may have here again
// (8 bytes, big endian): messages to older replica IDs are dropped, so a
// late message never brings a removed replica back.
func tombstoneKey(rangeID uint64) []byte {
	return storage.RangeLocalKey(rangeID, storage.SuffixTombstone)
}

func loadTombstone(r storage.Reader, rangeID uint64) (uint64, error) {
	v, err := r.Get(tombstoneKey(rangeID))
	if errors.Is(err, storage.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("kvserver: tombstone of r%d has %d bytes: %w", rangeID, len(v), storage.ErrCorruption)
	}
	return binary.BigEndian.Uint64(v), nil
}

// replicasChanged is called once a replica change applied on this node's
// replica of rangeID: a replica that is no longer in the descriptor (or is
// there under another replica ID) is removed.
func (n *Node) replicasChanged(rangeID uint64, d *rpcpb.RangeDescriptor) {
	rr := n.replica(rangeID)
	if rr == nil {
		return
	}
	if me := replicaOn(d, n.NodeID()); me != nil && peerID(me) == rr.peer {
		return
	}
	// Not on this worker: removal stops the replica, which waits for the
	// round this call runs in.
	go n.removeReplica(rr, d, "removed from the range")
}

// removeReplica stops rr and deletes its state from the store: Raft log
// and state, descriptor, data (unless another replica here holds keys of
// the span), and writes the range's tombstone. d is the descriptor
// without rr (nil if unknown: then the tombstone is rr's replica ID + 1).
func (n *Node) removeReplica(rr *rangeReplica, d *rpcpb.RangeDescriptor, why string) {
	id := rr.r.RangeID()
	if n.replica(id) != rr {
		return
	}
	// Stopped first, and left in the node's map until its state is gone:
	// messages for the range meanwhile go to the stopped replica (and are
	// dropped), and no snapshot of an overlapping range is let in
	// (receiveRaft) whose data the clear below would delete.
	rr.r.Stop()
	span := rr.sm.Desc()
	next := replica.ReplicaIDOf(rr.peer) + 1
	if d != nil && d.NextReplicaId > next {
		next = d.NextReplicaId
	}
	b := n.eng.NewWriteBatch()
	defer b.Close()
	lo := storage.RangeLocalKey(id, 0)
	hi := storage.RangeLocalKey(id+1, 0)
	err := b.DeleteRange(lo[:len(lo)-1], hi[:len(hi)-1])
	if err == nil {
		err = b.Delete(registryKey(id))
	}
	if err == nil {
		err = b.Set(tombstoneKey(id), binary.BigEndian.AppendUint64(nil, next))
	}
	if err == nil && span != nil && !n.overlapsOther(id, span) {
		err = mvcc.ClearSpan(b, span.StartKey, span.EndKey)
	}
	if err == nil {
		err = b.Commit(true)
	}
	n.mu.Lock()
	if n.mu.replicas[id] == rr {
		delete(n.mu.replicas, id)
	}
	n.mu.Unlock()
	rr.sm.keys.forget() // give its entries back (keystates.go)
	if err != nil {
		n.log.Error("removing a replica's state", "range", id, "err", err)
		return
	}
	n.log.Info("replica removed", "range", id, "replica", replica.ReplicaIDOf(rr.peer), "why", why)
}

// overlapsOther reports whether an initialized replica other than
// rangeID's on this node holds keys of span.
func (n *Node) overlapsOther(rangeID uint64, span *rpcpb.RangeDescriptor) bool {
	for _, o := range n.replicaList() {
		od := o.sm.Desc()
		if o.r.RangeID() != rangeID && od != nil &&
			string(od.StartKey) < string(span.EndKey) && string(span.StartKey) < string(od.EndKey) {
			return true
		}
	}
	return false
}
