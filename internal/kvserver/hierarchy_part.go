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

// takePart is the leaf's handling of a part (its loop's goroutine):
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
//  4. Observe the read floor, Propose.
//  5. If the leaf passed it (a pending distributed part, or a committing
//     local transaction), its writes become intents, one Raft write per
//     range, each releasing that range's latches once applied; the other
//     latches are released. The vote (or decision) is in the Ready left
//     for carryOut, so it leaves only after the intents are durable.
func (l *hierLoop) takePart(in *hierPartIn) {
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
			return
		}
		g.writes = append(g.writes, w)
		written[string(w.Key)] = true
	}
	for _, k := range req.Reads {
		g := group(k)
		if g == nil {
			in.reply <- pbErr(rpcpb.ErrorCode_NOT_LEASEHOLDER, "node n%d holds no replica for key %q", n.NodeID(), k)
			return
		}
		g.reads = append(g.reads, k)
	}
	slices.Sort(order)
	ctx, cancel := context.WithTimeout(n.stopCtx, n.cfg.RequestTimeout)
	defer cancel()
	releaseAll := func() {
		for _, id := range order {
			if g := groups[id]; g.g != nil {
				g.rr.latches.Release(g.g)
				g.g = nil
			}
		}
	}
	for _, id := range order {
		g := groups[id]
		term, ok := l.rt.fenceTerm(id)
		if !ok {
			releaseAll()
			in.reply <- n.notLeaseholder(g.rr)
			return
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
			releaseAll()
			in.reply <- pbErr(rpcpb.ErrorCode_UNAVAILABLE, "waiting for latches: %v", err)
			return
		}
		g.g = lg
		if st := g.rr.r.Status(); !st.Leaseholder || st.Term != term {
			releaseAll()
			in.reply <- n.notLeaseholder(g.rr)
			return
		}
	}
	conflict := false
	check := func(k []byte) error {
		err := mvcc.Refresh(n.eng, k, nil, req.StartTs, math.MaxUint64, req.StartTs)
		var rc *mvcc.ReadConflictError
		if errors.As(err, &rc) {
			conflict = true
			return nil
		}
		return err
	}
	for _, id := range order {
		g := groups[id]
		for _, w := range g.writes {
			if err := check(w.Key); err != nil {
				releaseAll()
				in.reply <- pbErr(rpcpb.ErrorCode_INTERNAL, "storage check: %v", err)
				return
			}
		}
		for _, k := range g.reads {
			if err := check(k); err != nil {
				releaseAll()
				in.reply <- pbErr(rpcpb.ErrorCode_INTERNAL, "storage check: %v", err)
				return
			}
		}
	}
	part := hierarchy.Part{Txn: txn, Client: hierarchy.ClientID(req.Nodes[0]), Snapshot: req.StartTs, Conflict: conflict}
	for _, nd := range req.Nodes {
		part.Nodes = append(part.Nodes, hierarchy.NodeID(nd))
	}
	for _, k := range req.Reads {
		part.Reads = append(part.Reads, string(k))
	}
	var writeKeys [][]byte
	for _, w := range req.Writes {
		part.Writes = append(part.Writes, string(w.Key))
		writeKeys = append(writeKeys, w.Key)
	}
	l.v.Observe(n.hierReadFloor.Load())
	perr := l.v.Propose(part)
	rd := l.v.Ready()
	passed := false
	for _, pr := range rd.Parts {
		if pr.Part.Txn == txn && pr.OK {
			passed = true
		}
	}
	for _, d := range rd.Decisions {
		if d.Txn == txn && d.Commit {
			passed = true
		}
	}
	var failure *rpcpb.Error
	if passed && perr == nil && len(req.Writes) > 0 {
		failure = l.writeIntents(ctx, req, groups, order)
		l.parts[txn] = writeKeys
	}
	releaseAll()
	if failure != nil {
		// Some intents may be in place: the transaction must not commit.
		// Its abort is recorded before anything of this Ready leaves
		// (the decider's commit, if it comes, then finds it and sends it).
		abort := hierarchy.Decision{Txn: txn}
		local := false
		for i, d := range rd.Decisions {
			if d.Txn == txn {
				rd.Decisions[i], local = abort, true
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
	case perr != nil && errors.Is(perr, hierarchy.ErrOverloaded):
		in.reply <- pbErr(rpcpb.ErrorCode_UNAVAILABLE, "%v", perr)
	case perr != nil:
		in.reply <- pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "%v", perr)
	default:
		in.reply <- failure
	}
}

// writeIntents writes a passed part's writes as intents, one Raft write
// per range, the ranges in parallel; each write releases its range's
// latches once applied (writeLatched). It returns the first error.
func (l *hierLoop) writeIntents(ctx context.Context, req *rpcpb.HierCommitRequest, groups map[uint64]*partRange, order []uint64) *rpcpb.Error {
	n := l.rt.n
	meta := &rpcpb.TxnMeta{StartTs: req.StartTs, HeartbeatKey: keys.HeartbeatKey(req.StartTs)}
	var mu sync.Mutex
	var first *rpcpb.Error
	var wg sync.WaitGroup
	for _, id := range order {
		g := groups[id]
		if len(g.writes) == 0 {
			continue
		}
		b := &rpcpb.BatchRequest{RangeId: id}
		for _, w := range g.writes {
			b.Requests = append(b.Requests, &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PutIntent{PutIntent: &rpcpb.PutIntentRequest{
				Key: w.Key, Value: w.Value, Delete: w.Delete, Txn: meta}}})
		}
		lg := g.g
		g.g = nil // writeLatched releases it
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := n.writeLatched(ctx, g.rr, b, g.term, g.rr.lockTable(g.term), lg, nil)
			if resp.Error != nil {
				mu.Lock()
				if first == nil {
					first = resp.Error
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}
