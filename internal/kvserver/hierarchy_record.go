package kvserver

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/hierarchy"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// Part records: how a restarted leaf recovers its pending set (issue 9,
// item 6; docs/design-notes.md, "Restart: part records").
//
// When a leaf passes a distributed part, the node writes the part's
// intents through Raft and, once they are applied, queues the part's
// record (rpcpb.HierPartRecord: the transaction, its nodes, the keys read
// and written, the vote and the leaf's timestamp) for a node-local key;
// the vote leaves without waiting for it (see below). The record goes
// when the decision is applied (hierLoop.resolve). At start, the leaf reads the records back
// (recoverLeaf): those the status table decides are resolved and
// forgotten, those too old to commit are aborted there and resolved, and
// the rest are given to the core as Recovery.Pending, which votes for
// them again at once. So a transaction whose leaf crashed after voting
// can still commit, instead of waiting for HierarchyTxnAgeMax and being
// aborted by its other leaves.
//
// Why a record may be written late and without a sync of its own: its
// existence implies its intents are in place (it is queued after them),
// and its loss only brings back what a leaf without records does (its
// parts end by the other leaves' lookups and the age rule, under the
// lease fence). A record holds the vote and timestamp the leaf sent, and
// nothing else, so no vote contradicts it. So the leaf's loop never waits
// for one: records and their deletions go, in the order queued, through
// one writer goroutine (partRecorder), which commits what was queued in
// the last partRecorderFlushInterval in one unsynced batch (Raft's next
// synced write makes it durable, a few milliseconds later). The loop used
// to write them itself, which cost 8% of hierarchy-locking/b10's
// throughput: an unsynced Pebble commit is published only after the
// synced commits queued before it.

// hierPartPrefix is the node-local prefix of part records.
var hierPartPrefix = storage.NodeLocalKey("hier-part/")

// hierPartRecordKey is the record key of txn's part: the prefix and
// start_ts (8 bytes big endian).
func hierPartRecordKey(txn hierarchy.TxnID) []byte {
	return binary.BigEndian.AppendUint64(bytes.Clone(hierPartPrefix), uint64(txn))
}

// partRecord is the record of a part result.
func partRecord(pr hierarchy.PartResult) *rpcpb.HierPartRecord {
	r := &rpcpb.HierPartRecord{StartTs: uint64(pr.Part.Txn), Ok: pr.OK, Ts: pr.TS}
	for _, nd := range pr.Part.Nodes {
		r.Nodes = append(r.Nodes, uint64(nd))
	}
	for _, k := range pr.Part.Reads {
		r.Reads = append(r.Reads, []byte(k))
	}
	for _, k := range pr.Part.Writes {
		r.Writes = append(r.Writes, []byte(k))
	}
	return r
}

// partResultOf inverts partRecord (the client is the transaction's
// lowest node, as proposePart sets it).
func partResultOf(r *rpcpb.HierPartRecord) hierarchy.PartResult {
	p := hierarchy.Part{Txn: hierarchy.TxnID(r.GetStartTs()), Snapshot: r.GetStartTs()}
	for _, nd := range r.GetNodes() {
		p.Nodes = append(p.Nodes, hierarchy.NodeID(nd))
	}
	if len(p.Nodes) > 0 {
		p.Client = hierarchy.ClientID(p.Nodes[0])
	}
	for _, k := range r.GetReads() {
		p.Reads = append(p.Reads, string(k))
	}
	for _, k := range r.GetWrites() {
		p.Writes = append(p.Writes, string(k))
	}
	return hierarchy.PartResult{Part: p, OK: r.GetOk(), TS: r.GetTs()}
}

// partRecorderQueueMax bounds the record writes and deletions queued for
// a node's partRecorder; beyond it they are dropped (counted): a record
// dropped costs its part's recovery, a deletion dropped leaves a record
// that the next start finds decided and forgets.
const partRecorderQueueMax = 1 << 16

// recordOp is a part record to write (rec set) or to delete.
type recordOp struct {
	txn hierarchy.TxnID
	rec *hierarchy.PartResult
}

// partRecorder writes a node's part records and their deletions off the
// leaf's loop, in the order queued (see above).
type partRecorder struct {
	eng  *storage.Engine
	log  interface{ Warn(string, ...any) }
	in   chan recordOp
	quit chan struct{}
	done chan struct{}
	// dropped: ops not queued (queue full) or not written (a failed
	// batch).
	dropped func(int)
}

func newPartRecorder(eng *storage.Engine, log interface{ Warn(string, ...any) }, dropped func(int)) *partRecorder {
	r := &partRecorder{eng: eng, log: log, in: make(chan recordOp, partRecorderQueueMax),
		quit: make(chan struct{}), done: make(chan struct{}), dropped: dropped}
	go r.run()
	return r
}

// queue hands ops to the writer without waiting.
func (r *partRecorder) queue(ops ...recordOp) {
	for i, op := range ops {
		select {
		case r.in <- op:
		default:
			r.dropped(len(ops) - i)
			return
		}
	}
}

// stop writes what is queued and stops the writer (before the store
// closes).
func (r *partRecorder) stop() {
	select {
	case <-r.quit:
	default:
		close(r.quit)
	}
	<-r.done
}

// partRecorderFlushInterval is how long the writer gathers ops before it
// commits them: one Pebble commit per interval and node instead of two
// per leaf round, and a record whose decision came within the interval
// is never written at all.
const partRecorderFlushInterval = 10 * time.Millisecond

func (r *partRecorder) run() {
	defer close(r.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var first recordOp
		select {
		case first = <-r.in:
		case <-r.quit:
			r.flush(recordOp{}, false)
			return
		}
		timer.Reset(partRecorderFlushInterval)
		select {
		case <-timer.C:
		case <-r.quit:
			r.flush(first, true)
			return
		}
		r.flush(first, true)
	}
}

// flush commits first (if has) and every op queued, in one unsynced
// batch: per transaction the last op counts, and a record written and
// deleted within the batch is neither.
func (r *partRecorder) flush(first recordOp, has bool) {
	last := map[hierarchy.TxnID]recordOp{}
	setHere := map[hierarchy.TxnID]bool{}
	var order []hierarchy.TxnID
	n := 0
	take := func(op recordOp) {
		n++
		if _, ok := last[op.txn]; !ok {
			order = append(order, op.txn)
		}
		switch {
		case op.rec != nil:
			last[op.txn], setHere[op.txn] = op, true
		case setHere[op.txn]:
			delete(last, op.txn)
			delete(setHere, op.txn)
		default:
			last[op.txn] = op
		}
	}
	if has {
		take(first)
	}
more:
	for {
		select {
		case op := <-r.in:
			take(op)
		default:
			break more
		}
	}
	if len(last) == 0 {
		return
	}
	b := r.eng.NewWriteBatch()
	defer b.Close()
	var err error
	for _, t := range order {
		op, ok := last[t]
		if !ok {
			continue
		}
		k := hierPartRecordKey(t)
		if op.rec == nil {
			err = b.Delete(k)
		} else {
			var v []byte
			if v, err = proto.Marshal(partRecord(*op.rec)); err == nil {
				err = b.Set(k, v)
			}
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		err = b.Commit(false)
	}
	if err != nil {
		r.dropped(n)
		r.log.Warn("hierarchy: writing part records failed", "ops", n, "err", err)
	}
}

// loadPartRecords reads every part record of the node, in start_ts
// order. A record that does not decode is damage (storage.ErrCorruption).
func loadPartRecords(eng *storage.Engine) ([]hierarchy.PartResult, error) {
	hi := bytes.Clone(hierPartPrefix)
	hi[len(hi)-1]++
	it, err := eng.NewIter(hierPartPrefix, hi)
	if err != nil {
		return nil, err
	}
	var out []hierarchy.PartResult
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		v, err := it.Value()
		if err != nil {
			_ = it.Close()
			return nil, err
		}
		r := &rpcpb.HierPartRecord{}
		if len(k) != len(hierPartPrefix)+8 || proto.Unmarshal(v, r) != nil ||
			r.GetStartTs() != binary.BigEndian.Uint64(k[len(hierPartPrefix):]) {
			_ = it.Close()
			return nil, fmt.Errorf("kvserver: damaged hierarchy part record %x: %w", k, storage.ErrCorruption)
		}
		out = append(out, partResultOf(r))
	}
	return out, it.Close()
}

// recoveryPlan is what a restarted leaf does with its part records
// (planRecovery).
type recoveryPlan struct {
	// pending: undecided, given back to the core (Recovery.Pending).
	pending []hierarchy.PartResult
	// resolve: decided in the status table; their intents are resolved
	// and their records forgotten.
	resolve []hierarchy.Decision
	// abort: undecided and not to be given back (too old to commit, a
	// vote that failed, beyond PendingMax, or a part the core would
	// refuse); aborted in the status table, then resolved as it says.
	abort []hierarchy.TxnID
	// clockFloor: the highest timestamp among the records and their
	// commit decisions (Recovery.ClockFloor's share from the records).
	clockFloor uint64
	// writes: each record's written keys, for the resolution.
	writes map[hierarchy.TxnID][][]byte
}

// planRecovery sorts recs by what the status table says of them
// (decided: start_ts -> commit_ts, 0 for aborted, as
// client.DB.LookupTxns returns it). Pure: the caller does the I/O.
func planRecovery(recs []hierarchy.PartResult, decided map[uint64]uint64, tooOld func(hierarchy.TxnID) bool,
	tree *hierarchy.Tree, leaf hierarchy.ValidatorID, pendingMax int) recoveryPlan {
	p := recoveryPlan{writes: map[hierarchy.TxnID][][]byte{}}
	recs = slices.Clone(recs)
	slices.SortFunc(recs, func(a, b hierarchy.PartResult) int { return cmp.Compare(a.Part.Txn, b.Part.Txn) })
	for _, pr := range recs {
		t := pr.Part.Txn
		p.clockFloor = max(p.clockFloor, pr.TS)
		ws := make([][]byte, len(pr.Part.Writes))
		for i, k := range pr.Part.Writes {
			ws[i] = []byte(k)
		}
		p.writes[t] = ws
		if c, ok := decided[uint64(t)]; ok {
			p.resolve = append(p.resolve, hierarchy.Decision{Txn: t, Commit: c != 0, TS: c})
			p.clockFloor = max(p.clockFloor, c)
			continue
		}
		decider, known := tree.Decider(pr.Part.Nodes)
		if !pr.OK || tooOld(t) || !known || decider == leaf || len(p.pending) >= pendingMax {
			p.abort = append(p.abort, t)
			continue
		}
		p.pending = append(p.pending, pr)
	}
	return p
}

// recoverLeaf makes the restarted leaf cfg.ID from the node's part
// records (see above), with the records it gave back pending. An error
// (the status table or the oracle could not be reached) leaves every
// record in place; the caller then starts the leaf without them, which is
// what losing them would do, and the next start reads them again.
func (rt *hierRuntime) recoverLeaf(ctx context.Context, cfg hierarchy.Config) (*hierarchy.Validator, error) {
	recs, err := loadPartRecords(rt.n.eng)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return hierarchy.New(cfg, hierarchy.Recovery{})
	}
	starts := make([]uint64, len(recs))
	for i, pr := range recs {
		starts[i] = uint64(pr.Part.Txn)
	}
	decided, err := rt.db.LookupTxns(ctx, starts)
	if err != nil {
		return nil, fmt.Errorf("hierarchy: recovering %d part records: status lookup: %w", len(recs), err)
	}
	// The clock floor must be at or above everything the leaf issued or
	// observed before the crash, its watermarks (timestamp variant)
	// included, and the records hold only some of that: a fresh oracle
	// timestamp is above every snapshot served and every leaf timestamp
	// issued before (they follow the oracle's).
	// Through the node's client, which finds the oracle's host (this
	// node, just restarted, may not know it yet).
	fresh, err := rt.db.Timestamp(ctx)
	if err != nil {
		return nil, fmt.Errorf("hierarchy: recovering %d part records: a fresh timestamp: %w", len(recs), err)
	}
	plan := planRecovery(recs, decided, tooOld, rt.tree, cfg.ID, cfg.PendingMax)
	floor := max(plan.clockFloor, fresh)
	// The core checks what it is given again; a refusal (a record of keys
	// it does not take) aborts every recovered part instead of keeping the
	// leaf from starting.
	v, err := hierarchy.New(cfg, hierarchy.Recovery{ClockFloor: floor, Pending: plan.pending})
	if err != nil {
		rt.n.log.Warn("hierarchy: recovered parts refused by the validator; aborting them", "err", err)
		for _, pr := range plan.pending {
			plan.abort = append(plan.abort, pr.Part.Txn)
		}
		plan.pending = nil
		if v, err = hierarchy.New(cfg, hierarchy.Recovery{ClockFloor: floor}); err != nil {
			return nil, err
		}
	}
	if err := rt.endRecovered(ctx, plan); err != nil {
		return nil, err
	}
	rt.metrics.add(&rt.metrics.recovered, int64(len(plan.pending)))
	rt.metrics.add(&rt.metrics.recoveredEnded, int64(len(plan.resolve)+len(plan.abort)))
	rt.n.log.Info("hierarchy: leaf recovered its part records", "pending", len(plan.pending),
		"decided", len(plan.resolve), "aborted", len(plan.abort))
	return v, nil
}

// endRecovered records the aborts a recovery plan asks for, then
// resolves the intents of every decided record and queues the records'
// deletion (partRecorder).
func (rt *hierRuntime) endRecovered(ctx context.Context, plan recoveryPlan) error {
	resolve := plan.resolve
	if len(plan.abort) > 0 {
		want := make([]client.TxnDecision, len(plan.abort))
		for i, t := range plan.abort {
			want[i] = client.TxnDecision{StartTs: uint64(t)}
		}
		held, recorded, err := rt.db.DecideTxns(ctx, want)
		for i, h := range held {
			if i < len(recorded) && recorded[i] {
				// Held otherwise only if it was decided meanwhile (a
				// commit needs every vote, this one included, so only
				// for a record whose vote had reached the decider).
				resolve = append(resolve, hierarchy.Decision{Txn: hierarchy.TxnID(h.StartTs), Commit: h.Committed, TS: h.CommitTs})
			}
		}
		if err == nil && len(resolve) < len(plan.resolve)+len(plan.abort) {
			err = errors.New("some aborts not recorded")
		}
		if err != nil {
			return fmt.Errorf("hierarchy: recovering part records: aborting %d: %w", len(plan.abort), err)
		}
	}
	var intents []client.TxnIntents
	for _, d := range resolve {
		if ws := plan.writes[d.Txn]; len(ws) > 0 {
			intents = append(intents, txnIntents(d, ws))
		}
	}
	if err := rt.db.ResolveTxnIntents(ctx, intents); err != nil {
		// Readers resolve them by the status table meanwhile.
		rt.n.log.Warn("hierarchy: resolving recovered parts' intents failed", "transactions", len(intents), "err", err)
	}
	for _, d := range resolve {
		rt.records.queue(recordOp{txn: d.Txn})
	}
	return nil
}
