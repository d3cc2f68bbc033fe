package kvserver

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// Repair of a replica whose data is found damaged (issue 13, item 5).
//
// Every read of a blob record verifies its checksums (internal/vlog); one
// that fails is storage.ErrCorruption, and the engine tells the node
// (storage.Engine.SetCorruptionHandler) which data key it was reading.
// The replica of the range holding that key is then damaged:
//
//  1. It logs the error once, with the range, the key, the file and the
//     offset, and from then on serves nothing: requests get
//     NOT_LEASEHOLDER (the client goes to another replica), the request
//     that met the damage included, so no client sees the corruption as
//     long as a healthy replica can take over.
//  2. If it leads the range, it hands the leadership (the lease) to a
//     caught-up voter (repairDamaged, every ReportDamageInterval).
//  3. It reports itself (Internal.ReportDamage) to the nodes of the
//     range's other replicas, every interval until it is gone: whichever
//     leads now or next knows of it, and none hands the lease back to it
//     (the lease went round three nodes when only the leader was told).
//  4. The leader remembers the report for DamageReportTTL and its
//     replicate queue treats the replica as one on a bad node
//     (allocator.Replica.Damaged): it never moves the lease there, and
//     replaces the replica through Raft configuration changes: a learner
//     on another node, or, with no other node, removal of the damaged
//     replica and then a new replica (a new replica ID) on the same node,
//     which a snapshot from the leader fills. The damaged replica learns
//     its removal by applying it (or from a newer replica arriving) and
//     deletes its state, damaged bytes included.
//
// Raft's state is never touched by hand: the damaged replica keeps voting
// and acknowledging appends (its log is in the LSM, which Pebble checks
// separately) until a configuration change removes it. Deleting its data
// in place and asking for a snapshot would break Raft's promise that an
// acknowledged entry stays (the leader's Match for it would be ahead of
// its log), so that path was rejected.
//
// The damage mark lives in memory: a node restarted with the damaged
// store serves again until a read meets the damage again, and repeats the
// repair. A background scrub (scrub.go) finds damage that no read meets.

// ReportDamageInterval is how often a damaged replica retries handing
// over the lease and reporting itself to the leader.
const ReportDamageInterval = 500 * time.Millisecond

// DamageReportTTL is how long a leader remembers a damage report; the
// damaged replica repeats it every ReportDamageInterval while it lives.
const DamageReportTTL = time.Minute

// damageReports are the reports this node received as a leader: by range,
// the damaged replica's peer ID and until when the report holds.
type damageReports struct {
	mu sync.Mutex
	m  map[uint64]damageReport
}

type damageReport struct {
	node, peer uint64
	until      time.Time
}

// damagedPeer returns the peer ID of rangeID's replica reported damaged
// (0: none).
func (d *damageReports) damagedPeer(rangeID uint64) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.m[rangeID]
	if !ok {
		return 0
	}
	if time.Now().After(r.until) {
		delete(d.m, rangeID)
		return 0
	}
	return r.peer
}

// note records a report and says whether it is new.
func (d *damageReports) note(rangeID, node, peer uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[uint64]damageReport{}
	}
	old, had := d.m[rangeID]
	d.m[rangeID] = damageReport{node: node, peer: peer, until: time.Now().Add(DamageReportTTL)}
	return !had || old.peer != peer || time.Now().After(old.until)
}

// isDamaged reports whether the replica of d on nodeID is reported
// damaged (this node leads d's range).
func (n *Node) isDamaged(d *rpcpb.RangeDescriptor, nodeID uint64) bool {
	p := n.damage.damagedPeer(d.RangeId)
	if p == 0 {
		return false
	}
	rd := replicaOn(d, nodeID)
	return rd != nil && peerID(rd) == p
}

// onCorruption is the engine's corruption handler: key (a physical data
// key) failed its check when read. It runs inside the read: it only marks
// the replica and starts the repair.
func (n *Node) onCorruption(key []byte, err error) {
	logical, _, _, derr := mvcc.DecodeKey(key)
	if derr != nil {
		n.log.Error("store corruption: a damaged value under a key that does not decode", "key", fmt.Sprintf("%x", key), "err", err)
		return
	}
	var rr *rangeReplica
	for _, c := range n.replicaList() {
		if d := c.sm.Desc(); d != nil && keys.Contains(d.StartKey, d.EndKey, logical) {
			rr = c
			break
		}
	}
	if rr == nil {
		n.log.Error("store corruption: a damaged value in no range of this node", "key", fmt.Sprintf("%q", logical), "err", err)
		return
	}
	n.markDamaged(rr, logical, err)
}

// markDamaged marks rr damaged (once) and starts its repair. key, if not
// nil, is the logical key whose value failed; err says where.
func (n *Node) markDamaged(rr *rangeReplica, key []byte, err error) {
	if !rr.damaged.CompareAndSwap(false, true) {
		return
	}
	args := []any{"range", rr.r.RangeID()}
	if key != nil {
		args = append(args, "key", fmt.Sprintf("%q", key))
	}
	n.log.Error("store corruption: this replica stops serving the range, gives up its lease and is rebuilt from a healthy replica",
		append(args, "err", err)...)
	n.ops.metrics.damagedReplicas.Inc()
	go n.repairDamaged(rr)
}

// damagedErr is the answer of a damaged replica to every request.
func (n *Node) damagedErr(rr *rangeReplica) *rpcpb.Error {
	st := rr.r.Status()
	e := pbErr(rpcpb.ErrorCode_NOT_LEASEHOLDER, "range r%d: the replica on n%d is damaged and being rebuilt", st.RangeID, n.NodeID())
	if st.Leader != n.NodeID() {
		e.LeaseholderHint = st.Leader
		e.LeaseholderAddress = n.nodeAddress(st.Leader)
	}
	e.Range = rr.sm.Desc()
	return e
}

// repairDamaged runs steps 2 and 3 of the package comment for the damaged
// replica rr until rr is no longer this node's replica of its range (it
// was removed) or the node stops.
func (n *Node) repairDamaged(rr *rangeReplica) {
	id := rr.r.RangeID()
	t := time.NewTicker(ReportDamageInterval)
	defer t.Stop()
	var lastStep string
	step := func(s string, args ...any) {
		if s != lastStep {
			lastStep = s
			n.log.Warn("damaged replica: "+s, append([]any{"range", id}, args...)...)
		}
	}
	for {
		if n.replica(id) != rr {
			n.log.Info("damaged replica removed: the range's new replica here is filled by a snapshot from a healthy one", "range", id)
			return
		}
		st := rr.r.Status()
		d := rr.sm.Desc()
		switch {
		case d == nil:
		case st.IsLeader:
			n.sendDamageReports(rr, d)
			// The voter the others' balance would pick too, now that
			// they know of the damage: else the lease may go round.
			target := preferredLeaderAmong(d, func(id uint64) bool {
				return id != n.NodeID() && slices.Contains(st.CaughtUp, id)
			})
			if target == 0 {
				step("no caught-up voter to take the lease yet")
				break
			}
			step("handing the lease over", "to", target)
			rr.r.TransferLeader(target)
		default:
			step("reporting to the range's other replicas", "leader", st.Leader)
			n.sendDamageReports(rr, d)
		}
		select {
		case <-n.stopc:
			return
		case <-t.C:
		}
	}
}

// sendDamageReports reports rr damaged to the nodes of d's other
// replicas, at once: whichever leads now or next knows it (a leader that
// did not would hand the lease back by its preference).
func (n *Node) sendDamageReports(rr *rangeReplica, d *rpcpb.RangeDescriptor) {
	ctx, cancel := context.WithTimeout(n.stopCtx, n.electionTimeout())
	defer cancel()
	var wg sync.WaitGroup
	for _, rd := range d.Replicas {
		if rd.NodeId == n.NodeID() {
			continue
		}
		cl, err := n.internalClient(rd.NodeId)
		if err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = cl.ReportDamage(ctx, &rpcpb.DamageReport{RangeId: rr.r.RangeID(), NodeId: n.NodeID(), PeerId: rr.peer, Reason: "corruption found when read"})
		}()
	}
	wg.Wait()
}

// ReportDamage implements rpcpb.InternalServer.
func (s *internalService) ReportDamage(ctx context.Context, req *rpcpb.DamageReport) (*rpcpb.DamageReportResponse, error) {
	n := s.n
	rr := n.replica(req.RangeId)
	if rr == nil || rr.sm.Desc() == nil {
		return &rpcpb.DamageReportResponse{Error: pbErr(rpcpb.ErrorCode_RANGE_NOT_FOUND, "node n%d has no replica of range r%d", n.NodeID(), req.RangeId)}, nil
	}
	// Noted by a follower too: it may lead next.
	if n.damage.note(req.RangeId, req.NodeId, req.PeerId) {
		n.log.Warn("replica reported damaged: the replicate queue replaces it", "range", req.RangeId, "node", req.NodeId, "reason", req.Reason)
	}
	n.markActive(req.RangeId) // the next balance round looks at the range
	return &rpcpb.DamageReportResponse{}, nil
}
