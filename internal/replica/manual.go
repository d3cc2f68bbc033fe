package replica

import (
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
)

// Driving a replica by hand.
//
// A replica that is never started has no scheduler: its inbox fills (Step,
// Tick, Campaign, ProposeNoWait, ReadIndexNoWait...) and nothing drains it
// until the caller calls HandleReady, on its own goroutine. A test can so
// drive the replicas of a range step by step, with no goroutine and no
// clock but the one it passes in Config.Now (kvserver's stepped harness,
// stepped_test.go, does). The blocking calls (Propose, ProposeEvaluated,
// ReadIndex, WaitLeaseholder) must not be used on such a replica: nothing
// would ever answer them.

// HandleReady handles the replica's work once, on the caller's goroutine,
// as a scheduler worker handles it in a round of this replica alone
// (Scheduler.round): drain the inbox into the RawNode; take its Ready; send
// the messages that promise nothing durable; persist the Ready's Raft state
// in one engine batch; send the rest; apply the committed entries; serve
// reads; Advance. It returns the Ready it handled, or ok false when the
// RawNode had none (the inbox was still drained). The Ready's slices are
// valid until the next call.
//
// It panics on a started replica: that one belongs to its scheduler.
func (r *Replica) HandleReady() (rd raft.Ready, ok bool) {
	r.mu.Lock()
	started := r.mu.started
	r.mu.Unlock()
	if started {
		panic(fmt.Sprintf("replica r%d: HandleReady on a started replica", r.cfg.RangeID))
	}
	if r.workers.Add(1) != 1 {
		panic(fmt.Sprintf("replica r%d: HandleReady while another caller handles it", r.cfg.RangeID))
	}
	defer r.workers.Add(-1)
	wb := r.cfg.Engine.NewWriteBatch()
	defer wb.Close()
	r.raftMu.Lock()
	p := r.prepareReady(wb)
	if p == nil {
		r.raftMu.Unlock()
		return raft.Ready{}, false
	}
	if p.wrote {
		if err := wb.Commit(p.sync); err != nil {
			panic(fmt.Sprintf("replica r%d: persisting Raft state: %v", r.cfg.RangeID, err))
		}
	}
	r.persisted(p)
	r.raftMu.Unlock()
	// As in Scheduler.round, raftMu is let go between the phases: applying
	// a split may stop another replica.
	r.raftMu.Lock()
	r.completeReady(p)
	r.raftMu.Unlock()
	return p.rd, true
}

// ProposeNoWait is ProposeEvaluated without the wait, for a replica driven
// by HandleReady: it queues cmd and returns at once. finished (required) is
// called once with the outcome: at once if the replica is not the leader
// in term (0: any term) or its queue is full, else from a later
// HandleReady (applied, or dropped) or from Stop.
//
// It shares the queueing half of ProposeEvaluated (queueProposal).
func (r *Replica) ProposeNoWait(cmd []byte, term uint64, finished func(result any, err error)) {
	_, _ = r.queueProposal(cmd, term, finished)
}

// ReadIndexNoWait is ReadIndex without the wait, for a replica driven by
// HandleReady: the returned channel receives nil once a later HandleReady
// has confirmed leadership with a quorum and applied every entry committed
// before the call, or an error (ErrNotLeader, ErrStopped).
func (r *Replica) ReadIndexNoWait() <-chan error {
	w := &readWaiter{done: make(chan error, 1)}
	if st := r.Status(); !st.IsLeader {
		w.done <- ErrNotLeader
		return w.done
	}
	r.mu.Lock()
	if r.mu.stopped {
		w.done <- ErrStopped
	} else {
		r.mu.reads = append(r.mu.reads, w)
		r.wakeLocked()
	}
	r.mu.Unlock()
	return w.done
}

// Now reads the replica's clock (Config.Now). A lease expiry in Status is
// on this clock: compare it with Now, not with another clock.
func (r *Replica) Now() time.Time { return r.cfg.Now() }
