package replica

import (
	"fmt"

	"github.com/canopy-db/canopy/internal/storage"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// pendingReady is one range's Ready between the phases of a scheduler
// round (see Scheduler.round).
type pendingReady struct {
	r  *Replica
	rd raft.Ready
	// late are the messages of rd that may only leave once rd's state is
	// durable (see needsDurableState).
	late []raftpb.Message
	// after runs once the snapshot in rd is applied (nil if none).
	after func()
	// wrote: rd had Raft state to persist. sync: it must be synced.
	wrote, sync bool
	// slot is the range's index in the worker's batch.
	slot int
}

// needsDurableState reports whether sending m promises that the state it
// answers is on this node's disk. These are the types etcd raft itself
// holds back until the unstable state is persisted (raft.go, send: its
// msgsAfterAppend): an append acknowledgement counts towards committing
// the entries, a vote must not be cast twice in a term. Every other
// message may leave before the Ready that carries it is persisted: a
// leader's appends and heartbeats, a candidate's vote requests (its own
// vote counts only once it is durable: raft steps it at Advance).
func needsDurableState(m raftpb.Message) bool {
	switch m.Type {
	case raftpb.MsgAppResp, raftpb.MsgVoteResp, raftpb.MsgPreVoteResp:
		return true
	}
	return false
}

// supersededApps returns the indexes of msgs (nil if none) that need not
// be sent: a commit-only MsgApp (no entries) to a follower followed, in the
// same Ready, by another MsgApp to that follower in the same term whose
// previous-entry index is at least as high. The later one tells the
// follower all the earlier one would: the follower's commit index becomes
// min(Commit, Index + len(Entries)), and both Commit and Index are at least
// the earlier's; its answer acknowledges at least as much. This is common
// under load: in one Ready the leader steps an acknowledgement, which
// advances the commit index and broadcasts it with empty appends, and new
// proposals, which it appends to the same followers. Not sending a
// message is always safe in Raft (the transport may lose any); this drops
// only one whose content is delivered by the next, in order, on the same
// stream, and spares the follower's answer to it as well.
func supersededApps(msgs []raftpb.Message) map[int]bool {
	var out map[int]bool
	for i := range msgs {
		m := &msgs[i]
		if m.Type != raftpb.MsgApp || len(m.Entries) != 0 {
			continue
		}
		for j := i + 1; j < len(msgs); j++ {
			l := &msgs[j]
			if l.Type == raftpb.MsgApp && l.To == m.To && l.Term == m.Term && l.Index >= m.Index && l.Commit >= m.Commit {
				if out == nil {
					out = map[int]bool{}
				}
				out[i] = true
				break
			}
		}
	}
	return out
}

// prepareReady is phase 1 of a round for this replica: it drains the inbox
// into the RawNode and, if the RawNode has a Ready, takes it, sends its
// messages that promise no durable state, and writes its Raft state into
// wb. It returns nil when there is no Ready (or the replica is stopped).
// raftMu must be held, and stay held until the batch is committed and
// persisted has run.
func (r *Replica) prepareReady(wb *storage.Batch) *pendingReady {
	if r.isStopped() {
		return nil
	}
	r.drainInbox()
	if !r.rn.HasReady() {
		r.dropHeartbeatResp = 0
		r.publishStatus()
		return nil
	}
	rd := r.rn.Ready()
	p := &pendingReady{r: r, rd: rd}
	if rd.SoftState != nil && rd.SoftState.RaftState != raft.StateLeader {
		// Pending ReadIndex requests may never be answered now.
		for k, rq := range r.readCtx {
			for _, w := range rq.waiters {
				w.done <- ErrNotLeader
			}
			delete(r.readCtx, k)
		}
		r.lease = leaderLease{}
		// Published before any proposer learns of the step-down below: a
		// proposer that is told "ambiguous" stops counting its write as in
		// flight (kvserver's closed timestamps), so whoever reads the
		// status after that must see this replica no longer leading.
		r.publishStatus()
		if rd.SoftState.Lead == raft.None {
			// No leader known: this replica stepped down cut off from its
			// followers (CheckQuorum), or lost an election. Its proposals
			// may still commit under a leader it cannot reach, or never:
			// their proposers learn it now (ErrAmbiguous) instead of at
			// their deadline (issue 13, item 7, case c). Releasing their
			// latches is safe: this replica evaluates nothing until it
			// leads again, and then only once every earlier entry has
			// applied (Status.Leaseholder). After a leadership transfer
			// (a leader known) they are left to apply, which they
			// usually do at once.
			for id, p := range r.proposals {
				p.finish(proposalResult{err: ErrAmbiguous})
				delete(r.proposals, id)
			}
			for idx := range r.byIndex {
				delete(r.byIndex, idx)
			}
		}
	}
	// Send first what needs nothing durable: the followers append while
	// this node persists (raft thesis 10.2.1; see the package comment).
	var early []raftpb.Message
	drop := r.dropHeartbeatResp
	r.dropHeartbeatResp = 0
	superseded := supersededApps(rd.Messages)
	if superseded != nil {
		r.prom().appsSuperseded.Add(float64(len(superseded)))
	}
	for i, m := range rd.Messages {
		if superseded[i] {
			continue
		}
		if drop != 0 && m.Type == raftpb.MsgHeartbeatResp && m.To == drop && r.quiescent.Load() {
			// The answer to the quiesce heartbeat this follower quiesced
			// on: it would only wake the leader.
			continue
		}
		if needsDurableState(m) {
			p.late = append(p.late, m)
		} else {
			early = append(early, m)
		}
	}
	if len(early) > 0 {
		r.cfg.Transport.Send(r.cfg.RangeID, early)
	}
	before := wb.Len()
	if !raft.IsEmptySnap(rd.Snapshot) {
		a, err := r.applySnapshot(wb, rd.Snapshot)
		if err != nil {
			// The snapshot cannot be persisted; Raft's view would run
			// ahead of the disk, so stop this replica rather than diverge.
			panic(fmt.Sprintf("replica r%d: applying snapshot: %v", r.cfg.RangeID, err))
		}
		p.after = a
		p.sync = true
	}
	if err := appendEntries(wb, r.cfg.RangeID, rd.Entries, r.lastIndex); err != nil {
		panic(fmt.Sprintf("replica r%d: %v", r.cfg.RangeID, err))
	}
	// The HardState is written when its term or vote changed (or with a
	// snapshot), not when only its commit index moved: that one is never
	// synced by etcd raft's rules (MustSync ignores it), so a restart may
	// find it behind anyway, and loadState raises it to the applied
	// index. A range with one command per Ready (many ranges, few
	// commands each) saved one engine write per replica and command.
	if hs := rd.HardState; !raft.IsEmptyHardState(hs) &&
		(hs.Term != r.hardDurable.Term || hs.Vote != r.hardDurable.Vote || !raft.IsEmptySnap(rd.Snapshot)) {
		hb, err := hs.Marshal()
		if err != nil {
			panic(err)
		}
		_ = wb.Set(storage.RangeLocalKey(r.cfg.RangeID, storage.SuffixHardState), hb)
		r.hardDurable = hs
	}
	p.wrote = wb.Len() > before
	p.sync = p.sync || (p.wrote && rd.MustSync)
	return p
}

// persisted updates the replica's in-memory log once p's Raft state is
// committed to the engine. raftMu must be held.
func (r *Replica) persisted(p *pendingReady) {
	rd := p.rd
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := r.rs.ApplySnapshot(rd.Snapshot); err != nil {
			panic(err)
		}
		r.applied = rd.Snapshot.Metadata.Index
		r.appliedTerm = rd.Snapshot.Metadata.Term
		r.truncIndex = rd.Snapshot.Metadata.Index
		r.confState = rd.Snapshot.Metadata.ConfState
		r.lastIndex = rd.Snapshot.Metadata.Index
	}
	if len(rd.Entries) > 0 {
		if err := r.rs.Append(rd.Entries); err != nil {
			panic(err)
		}
		r.prom().entriesAppended.Add(float64(len(rd.Entries)))
		r.lastIndex = rd.Entries[len(rd.Entries)-1].Index
		for _, e := range rd.Entries {
			id := entryID(e)
			if old := r.byIndex[e.Index]; old != nil && old.id != id {
				old.finish(proposalResult{err: ErrProposalDropped})
				delete(r.byIndex, e.Index)
				delete(r.proposals, old.id)
			}
			if p := r.proposals[id]; p != nil && id != 0 {
				r.byIndex[e.Index] = p
			}
			if e.Type == raftpb.EntryConfChange || e.Type == raftpb.EntryConfChangeV2 {
				r.pendingConfIndex = max(r.pendingConfIndex, e.Index)
			}
		}
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		_ = r.rs.SetHardState(rd.HardState)
	}
}

// completeReady is phase 2 of a round for this replica: it sends the
// messages that promise durable state, applies, serves reads and advances
// the RawNode. It reports whether the RawNode has more work. raftMu must be
// held. A replica stopped since phase 1 does nothing more.
func (r *Replica) completeReady(p *pendingReady) (more bool) {
	if r.isStopped() {
		return false
	}
	rd := p.rd
	// 2. Send what waited for the state to be durable.
	if len(p.late) > 0 {
		r.cfg.Transport.Send(r.cfg.RangeID, p.late)
	}
	// 3. Apply.
	if p.after != nil {
		p.after()
	}
	appliedBefore := r.applied
	r.applyEntries(rd.CommittedEntries) // skips entries applied already
	r.prom().entriesApplied.Add(float64(r.applied - appliedBefore))
	// 4. Reads.
	for _, rs := range rd.ReadStates {
		rq := r.readCtx[string(rs.RequestCtx)]
		if rq == nil {
			continue
		}
		delete(r.readCtx, string(rs.RequestCtx))
		r.extendLease(rq)
		for _, w := range rq.waiters {
			w.index = rs.Index
			r.applyWait = append(r.applyWait, w)
		}
	}
	r.serveReads()
	// 5. Advance.
	r.rn.Advance(rd)
	r.maybeTruncate()
	r.publishStatus()
	return r.rn.HasReady()
}
