package kvserver

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/eval"
	"github.com/canopy-db/canopy/internal/hierarchy"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// hierPartIn is a part handed to the leaf's loop by Commit.
type hierPartIn struct {
	req *rpcpb.HierCommitRequest
	// reply gets nil once the part is taken (its intents are in place if
	// it passed, its vote or decision is on its way), or the error that
	// kept it from being taken (nothing of it was written) or made it
	// fail after the leaf had passed it (the transaction is then aborted
	// in the status table before its vote leaves). Buffered (1).
	reply chan *rpcpb.Error
}

// partRange is a part's share of one range this node leads.
type partRange struct {
	rr     *rangeReplica
	term   uint64
	reads  [][]byte
	writes []*rpcpb.HierWrite
	g      *concurrency.LatchGuard
}

// replicaForKey is this node's replica of the range holding k, or nil.
func (n *Node) replicaForKey(k []byte) *rangeReplica {
	for _, rr := range n.replicaList() {
		if d := rr.sm.Desc(); d != nil && eval.ContainsKey(d, k) {
			return rr
		}
	}
	return nil
}

// The leaf's handling of a part, on its loop's goroutine (hierLoop.round:
// steps 1-3 in checkPart, 4 in proposePart, 5 in finishParts):
//
//  1. Every key must lie in a range this node leads, with its lease fence
//     passed (else NOT_LEASEHOLDER: nothing happens, the client aborts
//     and retries the transaction).
//  2. Latches on the part's keys (write latches on its writes, read
//     latches on its other reads), range by range in range-ID order, and
//     the lease checked again under them. A transactional read of a key
//     the part writes thus either raised the node's read floor before the
//     leaf observes it here, or waits for the part's intent (doc.go of
//     internal/hierarchy, rule 2).
//  3. The storage check: a committed version above the snapshot or
//     another transaction's intent on any of the part's keys is a
//     conflict the leaf may not know of (written under an earlier
//     leaseholder, or before the leaf restarted): Part.Conflict.
//  4. The core's check (Validator.Check, read-only, in parallel with the
//     round's other parts), then, in arrival order, Observe the read
//     floor and admit the part (ProposeChecked: its timestamp, holds,
//     vote).
//  5. If the leaf passed it (a pending distributed part, or a committing
//     local transaction), its writes become intents: one Raft write per
//     range for all the round's parts that write there, each releasing
//     those parts' latches on that range once applied; the other latches
//     are released. The vote (or decision) is in the Ready left
//     for carryOut, so it leaves only after the intents are durable.

// preparedPart is a part through steps 1-4 (above), holding its
// latches, its intents not yet written.
type preparedPart struct {
	in        *hierPartIn
	txn       hierarchy.TxnID
	groups    map[uint64]*partRange
	order     []uint64
	writeKeys [][]byte
	// conflict: the storage check found a version or an intent the leaf
	// may not know of (Part.Conflict).
	conflict bool
	// part is the core's part; ok, the core's check of it (Check).
	part   hierarchy.Part
	ok     bool
	rd     hierarchy.Ready
	passed bool
	perr   error
}

// checkPart is steps 1-3 (above) and the core's read-only check of step
// 4 (Validator.Check): it changes neither the validator core nor the
// loop's state, so the parts of one round (disjoint keys) are checked in
// parallel (round). nil if the part was refused (its reply sent, nothing
// held).
func (l *hierLoop) checkPart(in *hierPartIn) *preparedPart {
	n := l.rt.n
	req := in.req
	txn := hierarchy.TxnID(req.StartTs)
	groups := map[uint64]*partRange{}
	var order []uint64
	group := func(k []byte) *partRange {
		rr := n.replicaForKey(k)
		if rr == nil {
			return nil
		}
		id := rr.r.RangeID()
		g := groups[id]
		if g == nil {
			g = &partRange{rr: rr}
			groups[id] = g
			order = append(order, id)
		}
		return g
	}
	written := map[string]bool{}
	for _, w := range req.Writes {
		g := group(w.Key)
		if g == nil {
			in.reply <- pbErr(rpcpb.ErrorCode_NOT_LEASEHOLDER, "node n%d holds no replica for key %q", n.NodeID(), w.Key)
			return nil
		}
		g.writes = append(g.writes, w)
		written[string(w.Key)] = true
	}
	for _, k := range req.Reads {
		g := group(k)
		if g == nil {
			in.reply <- pbErr(rpcpb.ErrorCode_NOT_LEASEHOLDER, "node n%d holds no replica for key %q", n.NodeID(), k)
			return nil
		}
		g.reads = append(g.reads, k)
	}
	slices.Sort(order)
	ctx, cancel := context.WithTimeout(n.stopCtx, n.cfg.RequestTimeout)
	defer cancel()
	pp := &preparedPart{in: in, txn: txn, groups: groups, order: order}
	for _, id := range order {
		g := groups[id]
		term, ok := l.rt.fenceTerm(id)
		if !ok {
			pp.release()
			in.reply <- n.notLeaseholder(g.rr)
			return nil
		}
		g.term = term
		var spans []concurrency.LatchSpan
		for _, w := range g.writes {
			spans = append(spans, concurrency.LatchSpan{Span: concurrency.Span{Key: w.Key}, Access: concurrency.Write})
		}
		for _, k := range g.reads {
			if !written[string(k)] {
				spans = append(spans, concurrency.LatchSpan{Span: concurrency.Span{Key: k}, Access: concurrency.Read})
			}
		}
		lg, err := g.rr.latches.Acquire(ctx, spans)
		if err != nil {
			pp.release()
			in.reply <- pbErr(rpcpb.ErrorCode_UNAVAILABLE, "waiting for latches: %v", err)
			return nil
		}
		g.g = lg
		if st := g.rr.r.Status(); !st.Leaseholder || st.Term != term {
			pp.release()
			in.reply <- n.notLeaseholder(g.rr)
			return nil
		}
	}
	conflict := false
	for _, k := range partKeys(req) {
		err := mvcc.Refresh(n.eng, k, nil, req.StartTs, math.MaxUint64, req.StartTs)
		var rc *mvcc.ReadConflictError
		switch {
		case errors.As(err, &rc):
			conflict = true
		case err != nil:
			pp.release()
			in.reply <- pbErr(rpcpb.ErrorCode_INTERNAL, "storage check: %v", err)
			return nil
		}
	}
	pp.conflict = conflict
	part := hierarchy.Part{Txn: txn, Client: hierarchy.ClientID(req.Nodes[0]), Snapshot: req.StartTs, Conflict: pp.conflict}
	for _, nd := range req.Nodes {
		part.Nodes = append(part.Nodes, hierarchy.NodeID(nd))
	}
	for _, k := range req.Reads {
		part.Reads = append(part.Reads, string(k))
	}
	for _, w := range req.Writes {
		part.Writes = append(part.Writes, string(w.Key))
		pp.writeKeys = append(pp.writeKeys, w.Key)
	}
	pp.part = part
	// The core's own check, read-only: the round's other checks run
	// alongside, and nothing changes the core until they are all done
	// (round).
	pp.ok = l.v.Check(part)
	return pp
}

// proposePart is step 4 (above), on the loop's goroutine: the read
// floor observed after the part's latches were taken, then the part
// admitted with its check (ProposeChecked).
func (l *hierLoop) proposePart(pp *preparedPart) {
	n, txn := l.rt.n, pp.txn
	l.v.Observe(n.hierReadFloor.Load())
	pp.perr = l.v.ProposeChecked(pp.part, pp.ok)
	pp.rd = l.v.Ready()
	for _, pr := range pp.rd.Parts {
		if pr.Part.Txn == txn && pr.OK {
			pp.passed = true
		}
	}
	for _, d := range pp.rd.Decisions {
		if d.Txn == txn && d.Commit {
			pp.passed = true
		}
	}
	pp.passed = pp.passed && pp.perr == nil
}

// release releases the latches a prepared part still holds.
func (pp *preparedPart) release() {
	for _, id := range pp.order {
		if g := pp.groups[id]; g.g != nil {
			g.rr.latches.Release(g.g)
			g.g = nil
		}
	}
}

// finishParts is step 5 (above) for prepared parts taken in order:
// their intents are written (writeIntents), every latch is released, and
// their Readies are left, in order, for carryOut.
func (l *hierLoop) finishParts(pps []*preparedPart) {
	for _, pp := range pps {
		if pp.passed && len(pp.in.req.Writes) > 0 {
			l.parts[pp.txn] = pp.writeKeys
		}
	}
	failures := l.writeIntents(pps)
	l.recordParts(pps, failures)
	for i, pp := range pps {
		pp.release()
		rd := pp.rd
		if failures[i] != nil {
			// Some intents may be in place: the transaction must not
			// commit. Its abort is recorded before anything of this Ready
			// leaves (the decider's commit, if it comes, then finds it and
			// sends it).
			abort := hierarchy.Decision{Txn: pp.txn}
			local := false
			for j, d := range rd.Decisions {
				if d.Txn == pp.txn {
					rd.Decisions[j], local = abort, true
				}
			}
			if local {
				l.override(abort, false)
			} else {
				rd.Decisions = append(rd.Decisions, abort)
				l.v.Decided(abort)
			}
		}
		l.acc = mergeReady(l.acc, rd)
		switch {
		case pp.perr != nil && errors.Is(pp.perr, hierarchy.ErrOverloaded):
			pp.in.reply <- pbErr(rpcpb.ErrorCode_UNAVAILABLE, "%v", pp.perr)
		case pp.perr != nil:
			pp.in.reply <- pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "%v", pp.perr)
		default:
			pp.in.reply <- failures[i]
		}
	}
}

// writeIntents writes the passed parts' writes as intents: for each
// range, one command with the writes of every part of the round that
// writes there (each PutIntent under its own transaction), the ranges in
// parallel. A round's parts have disjoint keys (hierLoop.round), so one
// command for them all applies what separate ones would, with one
// proposal and one apply instead of one per part. Each command releases
// its parts' latches on that range once applied (writeLatched). It
// returns each part's first error: a command that fails fails every part
// in it.
func (l *hierLoop) writeIntents(pps []*preparedPart) []*rpcpb.Error {
	type rangeCmd struct {
		g      *partRange // the first part's, for the replica and term
		b      *rpcpb.BatchRequest
		guards []*concurrency.LatchGuard
		parts  []int
	}
	var cmds []*rangeCmd
	byRange := map[[2]uint64]*rangeCmd{}
	for i, pp := range pps {
		if !pp.passed || len(pp.in.req.Writes) == 0 {
			continue
		}
		meta := &rpcpb.TxnMeta{StartTs: pp.in.req.StartTs, HeartbeatKey: keys.HeartbeatKey(pp.in.req.StartTs)}
		for _, id := range pp.order {
			g := pp.groups[id]
			if len(g.writes) == 0 {
				continue
			}
			// By term too: a part checked under another term (the lease
			// moved during the round) must fail on its own.
			c := byRange[[2]uint64{id, g.term}]
			if c == nil {
				c = &rangeCmd{g: g, b: &rpcpb.BatchRequest{RangeId: id}}
				byRange[[2]uint64{id, g.term}] = c
				cmds = append(cmds, c)
			}
			for _, w := range g.writes {
				c.b.Requests = append(c.b.Requests, &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PutIntent{PutIntent: &rpcpb.PutIntentRequest{
					Key: w.Key, Value: w.Value, Delete: w.Delete, Txn: meta}}})
			}
			c.guards = append(c.guards, g.g)
			g.g = nil // writeLatched releases it
			c.parts = append(c.parts, i)
		}
	}
	failures := make([]*rpcpb.Error, len(pps))
	if len(cmds) == 0 {
		return failures
	}
	n := l.rt.n
	ctx, cancel := context.WithTimeout(n.stopCtx, n.cfg.RequestTimeout)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rr := c.g.rr
			resp := n.writeLatched(ctx, rr, c.b, c.g.term, rr.lockTable(c.g.term), nil, c.guards...)
			if resp.Error == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, i := range c.parts {
				if failures[i] == nil {
					failures[i] = resp.Error
				}
			}
		}()
	}
	wg.Wait()
	return failures
}

// recordParts queues the part records (hierarchy_record.go) of the
// distributed parts the leaf passed whose intents are in place.
func (l *hierLoop) recordParts(pps []*preparedPart, failures []*rpcpb.Error) {
	var ops []recordOp
	for i, pp := range pps {
		if !pp.passed || failures[i] != nil {
			continue
		}
		for _, pr := range pp.rd.Parts {
			if pr.Part.Txn == pp.txn && pr.OK {
				ops = append(ops, recordOp{txn: pr.Part.Txn, rec: &pr})
				l.recorded[pr.Part.Txn] = true
			}
		}
	}
	l.rt.records.queue(ops...)
}
