package kvserver

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/hierarchy"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// hierLoop is one goroutine owning one validator of the core: every input
// (a part, a message, an Observe, time) goes through its inbox, and after
// each the loop carries out the validator's Ready before it takes the
// next, in the contract's order (internal/hierarchy doc.go):
//
//  1. a part's intents are in place (through Raft, under the part's
//     latches) before the leaf's vote is in a Ready's messages; its part
//     record is queued then, written a little later off the loop
//     (hierarchy_part.go, hierarchy_record.go);
//  2. decisions are written to the status table (put-unless-exists,
//     batched per status range by the node's client) before any message
//     leaves; a decision that comes back otherwise (someone aborted the
//     transaction first, or it is older than HierarchyTxnAgeMax) is what
//     is sent instead, from then on (overrides);
//  3. messages are routed; decisions for this node's leaf wake the
//     answering Commit and resolve the part's intents (synchronously, so
//     that the next part on those keys finds them resolved);
//  4. lookups read the status table for overdue parts, and abort those
//     older than HierarchyTxnAgeMax.
//
// An inner validator (no parts, no intents) does not wait for step 2: it
// hands each Ready to its sender (send), which writes the Ready's
// decisions while the loop goes on, several Readies' at once, and lets
// each Ready's messages leave once its own decisions are durable and the
// messages of every earlier Ready have left. So the contract's order
// holds, and a decision no longer waits for the status writes of the
// decisions made before it. A leaf still waits for its writes (intents,
// resolutions): its votes may leave only after its parts' intents are
// durable, and its waits are what batch its parts and votes
// (docs/design-notes.md, "Decisions durable before anyone is told").
type hierLoop struct {
	rt   *hierRuntime
	id   hierarchy.ValidatorID
	leaf bool
	in   chan hierInput
	quit chan struct{}
	done chan struct{}

	// Owned by the loop's goroutine.
	v *hierarchy.Validator
	// parts (leaf): the writes of accepted parts not yet resolved, by
	// transaction, for their resolution.
	parts map[hierarchy.TxnID][][]byte
	// recorded (leaf): the pending parts that have a part record
	// (hierarchy_record.go), forgotten when their decision is applied.
	recorded map[hierarchy.TxnID]bool
	// carry is an input taken from the inbox that waits for the next
	// round (round).
	carry *hierInput
	// acc is what the parts' Readies (proposePart) left for carryOut, once
	// finishParts has written their intents under their latches.
	acc hierarchy.Ready
	// overrides: decisions the status table holds otherwise than the core
	// made them; overrideOrder bounds them (oldest dropped first).
	// Invariant: overrideOrder holds each key of overrides once, and
	// nothing else (so len(overrideOrder) == len(overrides) <=
	// hierOverridesMax).
	overrides     map[hierarchy.TxnID]hierarchy.Decision
	overrideOrder []hierarchy.TxnID

	// Inner validators only (nil at a leaf): Readies in the order the core
	// made them, each with the write of its decisions started (send), for
	// the sender goroutine (sendLoop), which then owns overrides and
	// overrideOrder; recording holds a token per write in flight.
	out       chan *outReady
	recording chan struct{}
	sendDone  chan struct{}
}

// outReady is a Ready on its way out of an inner validator (send).
type outReady struct {
	rd hierarchy.Ready
	// done is closed once res holds the outcome of writing rd's decisions.
	done chan struct{}
	res  recorded
}

// recorded is what the status table answered for a list of decisions
// (record).
type recorded struct {
	held     []client.TxnDecision
	recorded []bool
	err      error
}

type hierInput struct {
	part    *hierPartIn
	msg     *hierarchy.Message
	observe uint64
	// done, if set, is closed once the input was taken (observe).
	done chan struct{}
}

func (rt *hierRuntime) newLoop(id hierarchy.ValidatorID) (*hierLoop, error) {
	cfg := rt.cfg
	cfg.ID = id
	// A restarted leaf gets back its undecided parts from their records
	// (hierarchy_record.go) and votes for them again. Its node's ranges
	// are fenced (HierarchyLeaseFence) and its clock takes a fresh oracle
	// timestamp before any new part (updateFences); storage checks stand
	// in for its latest versions (hierarchy_part.go). An inner validator
	// recovers nothing.
	var v *hierarchy.Validator
	var err error
	if rt.tree.IsLeaf(id) {
		// Bounded by the age limit: a record older than that can only be
		// aborted, which its peers' lookups do anyway.
		ctx, cancel := context.WithTimeout(rt.n.stopCtx, min(rt.n.cfg.RequestTimeout, HierarchyTxnAgeMax))
		v, err = rt.recoverLeaf(ctx, cfg)
		cancel()
		if err != nil {
			// Started without its records, as if they were lost: the
			// fence covers that (design notes), and the next start reads
			// them again.
			rt.n.log.Warn("hierarchy: leaf starts without its part records", "err", err)
			v = nil
		}
	}
	if v == nil {
		if v, err = hierarchy.New(cfg, hierarchy.Recovery{}); err != nil {
			return nil, err
		}
	}
	l := &hierLoop{rt: rt, id: id, leaf: rt.tree.IsLeaf(id), in: make(chan hierInput, hierInboxMax),
		quit: make(chan struct{}), done: make(chan struct{}), v: v,
		parts: map[hierarchy.TxnID][][]byte{}, recorded: map[hierarchy.TxnID]bool{}, overrides: map[hierarchy.TxnID]hierarchy.Decision{}}
	// A recovered leaf's pending parts have their records, and their
	// intents to resolve when decided.
	for _, pr := range v.PendingParts() {
		l.recorded[pr.Part.Txn] = true
		for _, k := range pr.Part.Writes {
			l.parts[pr.Part.Txn] = append(l.parts[pr.Part.Txn], []byte(k))
		}
	}
	v.Tick(rt.now())
	if !l.leaf {
		l.out = make(chan *outReady, hierSendQueueMax)
		l.recording = make(chan struct{}, hierRecordingMax)
		l.sendDone = make(chan struct{})
		go l.sendLoop(rt.route)
	}
	go l.run()
	return l, nil
}

func (l *hierLoop) stop() {
	select {
	case <-l.quit:
	default:
		close(l.quit)
	}
	<-l.done
}

// offer queues an input without waiting; false if the inbox is full or
// the loop stopped.
func (l *hierLoop) offer(in hierInput) bool {
	select {
	case <-l.quit:
		return false
	default:
	}
	select {
	case l.in <- in:
		return true
	default:
		return false
	}
}

// submit queues an input, waiting for room within ctx.
func (l *hierLoop) submit(ctx context.Context, in hierInput) error {
	select {
	case l.in <- in:
		return nil
	case <-l.quit:
		return errors.New("hierarchy: validator stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// observe has the leaf observe ts and returns once it has.
func (l *hierLoop) observe(ctx context.Context, ts uint64) error {
	done := make(chan struct{})
	if err := l.submit(ctx, hierInput{observe: ts, done: done}); err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-l.quit:
		return errors.New("hierarchy: validator stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *hierLoop) run() {
	defer close(l.done)
	if l.out != nil {
		// What the loop handed its sender still leaves (or fails) first.
		defer func() {
			close(l.out)
			<-l.sendDone
		}()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if d, ok := l.v.NextDeadline(); ok {
			timer.Reset(max(d-l.rt.now(), 0))
		} else {
			timer.Reset(time.Hour)
		}
		if l.carry != nil {
			in := *l.carry
			l.carry = nil
			l.round(in)
		} else {
			select {
			case <-l.quit:
				return
			case in := <-l.in:
				l.round(in)
			case <-timer.C:
			}
		}
		l.v.Tick(l.rt.now())
		l.carryOut()
		l.rt.publish(l.id, l.v.Counts(), l.v.PendingCount())
	}
}

// hierRoundPartsMax bounds the parts a loop takes in one round.
const hierRoundPartsMax = 64

// round takes first and whatever else is queued (up to hierRoundPartsMax
// parts). Messages and observes apply first, in arrival order. Then the
// parts go through steps 1-4a (checkPart, hierarchy_part.go: latches, the
// storage check and the core's read-only Check) in parallel, since the
// parts of one round touch disjoint keys: this is where a leaf's
// validation uses more than one core. Then each is admitted in arrival
// order (ProposeChecked: timestamp, holds, vote);
// their intents are written together at the end of the round
// (finishParts), so concurrent parts share Raft's batched appends instead
// of one fsync each in turn. A part whose keys overlap a part of this
// round waits for the next round (l.carry): its latches would wait for
// latches this loop holds. Then the round's Ready is carried out (by run)
// before any later input: the contract's "before the next input touching
// the same keys" holds, since parts of one round touch disjoint keys and
// each part's Ready was taken right after its Propose.
//
// Why the checks may run before any part of the round is admitted: the
// storage check reads nothing the round's inputs write (decisions resolve
// intents only in carryOut, after the round), and the core's check of a
// part reads only its own keys' holds and versions, which the admission
// of parts on other keys leaves alone (ProposeChecked's contract).
func (l *hierLoop) round(first hierInput) {
	// The core learns the time before the round's inputs, not only after:
	// it stamps what an input starts (a leaf's part, the root's entry for a
	// transaction) with the time of its last Tick, and after an idle
	// stretch with no deadline (nothing pending) that time is stale by the
	// whole stretch, so a new part looked overdue at once (its vote
	// resent, the root's entry forgotten).
	l.v.Tick(l.rt.now())
	var inputs []hierInput
	latched := map[string]bool{}
	parts := 0
	add := func(in hierInput) bool {
		if in.part != nil {
			ks := partKeys(in.part.req)
			for _, k := range ks {
				if latched[string(k)] {
					l.carry = &in
					return false
				}
			}
			for _, k := range ks {
				latched[string(k)] = true
			}
			parts++
		}
		inputs = append(inputs, in)
		return true
	}
	if add(first) {
	more:
		for parts < hierRoundPartsMax {
			select {
			case in := <-l.in:
				if !add(in) {
					break more
				}
			default:
				break more
			}
		}
	}
	// Messages and observes first, in arrival order, then the parts: a
	// part from a client has no order with them (they come on other
	// links), and so the core does not change while the parts are
	// checked.
	for _, in := range inputs {
		if in.part == nil {
			l.take(in)
		}
	}
	checked := make([]*preparedPart, len(inputs))
	if parts > 1 {
		var wg sync.WaitGroup
		for i, in := range inputs {
			if in.part != nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					checked[i] = l.checkPart(in.part)
				}()
			}
		}
		wg.Wait()
	} else {
		for i, in := range inputs {
			if in.part != nil {
				checked[i] = l.checkPart(in.part)
			}
		}
	}
	var prepared []*preparedPart
	for i, in := range inputs {
		if in.part == nil {
			continue
		}
		if pp := checked[i]; pp != nil {
			l.proposePart(pp)
			prepared = append(prepared, pp)
		}
	}
	if len(prepared) > 0 {
		l.finishParts(prepared)
	}
}

// take applies a message or an observe to the validator (parts go
// through round's steps, hierarchy_part.go).
func (l *hierLoop) take(in hierInput) {
	switch {
	case in.msg != nil:
		if err := l.v.Step(*in.msg); err != nil {
			l.rt.n.log.Warn("hierarchy: message refused", "validator", l.id, "err", err)
		}
	case in.observe != 0:
		l.v.Observe(in.observe)
	}
	if in.done != nil {
		close(in.done)
	}
}

// carryOut does what the validator's Ready asks, until it asks nothing
// (a lookup may produce a decision, which produces a Ready).
func (l *hierLoop) carryOut() {
	for round := 0; round < 4 && (l.v.HasReady() || !l.acc.Empty()); round++ {
		rd := mergeReady(l.acc, l.v.Ready())
		l.acc = hierarchy.Ready{}
		if !l.leaf {
			// No parts, no resolutions: the sender does the rest.
			l.send(rd)
			l.lookup(rd.Lookups)
			continue
		}
		// Parts: made durable with their intents in finishParts.
		l.settle(&rd, l.record(rd.Decisions))
		l.rt.route(rd.Messages)
		l.resolve(rd.Resolve)
		l.lookup(rd.Lookups)
	}
}

// send hands an inner validator's Ready to its sender, first starting the
// write of its decisions (at most hierRecordingMax at once: it waits for a
// token).
func (l *hierLoop) send(rd hierarchy.Ready) {
	o := &outReady{rd: rd, done: make(chan struct{})}
	if len(rd.Decisions) == 0 {
		close(o.done)
	} else {
		l.recording <- struct{}{}
		go func() {
			defer func() { <-l.recording }()
			o.res = l.record(rd.Decisions)
			close(o.done)
		}()
	}
	l.out <- o
}

// sendLoop is an inner validator's sender: the Readies in order, each once
// its decisions' write is over, settled as a leaf's carryOut settles them,
// then routed (route is hierRuntime.route but in tests).
func (l *hierLoop) sendLoop(route func([]hierarchy.Message)) {
	defer close(l.sendDone)
	for o := range l.out {
		<-o.done
		rd := o.rd
		l.settle(&rd, o.res)
		route(rd.Messages)
	}
}

// settle readies rd to go out once its decisions' write is over (r, from
// record): what the status table holds otherwise goes into the overrides,
// the messages and resolutions of decisions that could not be written are
// dropped (nothing that depends on them may leave), and the rest is
// patched with the overrides.
func (l *hierLoop) settle(rd *hierarchy.Ready, r recorded) {
	if !l.applyRecorded(rd.Decisions, r) {
		rd.Messages, rd.Resolve = l.withoutUndecided(*rd)
	}
	l.patch(rd)
}

// record writes decisions to the status table (put-unless-exists) and
// returns what it holds for them. It touches no loop state, so an inner
// validator's sender runs several at once.
func (l *hierLoop) record(ds []hierarchy.Decision) recorded {
	if len(ds) == 0 {
		return recorded{}
	}
	want := make([]client.TxnDecision, len(ds))
	for i, d := range ds {
		c := d.Commit && !tooOld(d.Txn)
		if d.Commit && !c {
			l.rt.metrics.add(&l.rt.metrics.agedAborts, 1)
		}
		want[i] = client.TxnDecision{StartTs: uint64(d.Txn), Committed: c, CommitTs: d.TS}
		if !c {
			want[i].CommitTs = 0
		}
	}
	ctx, cancel := context.WithTimeout(l.rt.n.stopCtx, l.rt.n.cfg.RequestTimeout)
	defer cancel()
	var r recorded
	r.held, r.recorded, r.err = l.rt.db.DecideTxns(ctx, want)
	return r
}

// applyRecorded takes what the status table holds for ds (record) into the
// overrides: a decision not recorded is marked undecided (those are taken
// out as "undecided" by withoutUndecided), one held otherwise is
// overridden. False if some were not recorded.
func (l *hierLoop) applyRecorded(ds []hierarchy.Decision, r recorded) bool {
	ok := true
	for i, d := range ds {
		if !r.recorded[i] {
			ok = false
			l.override(hierarchy.Decision{Txn: d.Txn}, true)
			continue
		}
		h := hierarchy.Decision{Txn: d.Txn, Commit: r.held[i].Committed}
		if h.Commit {
			h.TS = r.held[i].CommitTs
		}
		if h != d {
			l.rt.metrics.add(&l.rt.metrics.overridden, 1)
			l.override(h, false)
		}
	}
	if r.err != nil {
		l.rt.n.log.Warn("hierarchy: decisions not recorded; not told", "validator", l.id, "err", r.err)
	}
	return ok
}

// undecidedMark marks an override entry whose decision is not durable.
const undecidedMark = ^uint64(0)

func (l *hierLoop) override(d hierarchy.Decision, undecided bool) {
	if undecided {
		d = hierarchy.Decision{Txn: d.Txn, TS: undecidedMark}
	}
	if _, ok := l.overrides[d.Txn]; !ok {
		l.overrideOrder = append(l.overrideOrder, d.Txn)
	}
	l.overrides[d.Txn] = d
	for len(l.overrideOrder) > hierOverridesMax {
		delete(l.overrides, l.overrideOrder[0])
		l.overrideOrder = l.overrideOrder[1:]
	}
}

// withoutUndecided drops the messages and resolutions of decisions that
// are not durable: the leaves vote again after ResendAfter and the
// decider decides again (the same way: a decision is a function of the
// votes).
func (l *hierLoop) withoutUndecided(rd hierarchy.Ready) ([]hierarchy.Message, []hierarchy.Decision) {
	undecided := func(t hierarchy.TxnID) bool {
		o, ok := l.overrides[t]
		return ok && o.TS == undecidedMark
	}
	var msgs []hierarchy.Message
	for _, m := range rd.Messages {
		switch m.Kind {
		case hierarchy.MsgResult:
			if undecided(m.Result.Txn) {
				continue
			}
		case hierarchy.MsgDecisions:
			var ds []hierarchy.Decision
			for _, d := range m.Decisions {
				if !undecided(d.Txn) {
					ds = append(ds, d)
				}
			}
			if len(ds) == 0 {
				continue
			}
			m.Decisions = ds
		}
		msgs = append(msgs, m)
	}
	var res []hierarchy.Decision
	for _, d := range rd.Resolve {
		if !undecided(d.Txn) {
			res = append(res, d)
		}
	}
	// Forget the undecided marks, in the order too: left there, each
	// failed persist added entries that named no override, which took the
	// bound's room and, once trimmed, deleted the override of a
	// transaction marked again later.
	kept := l.overrideOrder[:0]
	for _, t := range l.overrideOrder {
		if o, ok := l.overrides[t]; ok && o.TS == undecidedMark {
			delete(l.overrides, t)
			continue
		}
		kept = append(kept, t)
	}
	clear(l.overrideOrder[len(kept):])
	l.overrideOrder = kept
	return msgs, res
}

// patch replaces decisions the status table holds otherwise.
func (l *hierLoop) patch(rd *hierarchy.Ready) {
	if len(l.overrides) == 0 {
		return
	}
	fix := func(d hierarchy.Decision) hierarchy.Decision {
		if o, ok := l.overrides[d.Txn]; ok && o.TS != undecidedMark {
			return o
		}
		return d
	}
	for i := range rd.Messages {
		m := &rd.Messages[i]
		switch m.Kind {
		case hierarchy.MsgResult:
			m.Result = fix(m.Result)
		case hierarchy.MsgDecisions:
			ds := make([]hierarchy.Decision, len(m.Decisions))
			for j, d := range m.Decisions {
				ds[j] = fix(d)
			}
			m.Decisions = ds
		}
	}
	for i := range rd.Resolve {
		rd.Resolve[i] = fix(rd.Resolve[i])
	}
}

// resolve ends this node's parts: the answering Commit learns the
// decision, and the parts' intents are resolved (committed at the
// decision's timestamp, or removed), all of the Ready's transactions in
// one request per range (one Raft proposal each); the loop waits for it,
// so that the next part on those keys finds them resolved.
func (l *hierLoop) resolve(ds []hierarchy.Decision) {
	var forget []hierarchy.TxnID
	var intents []client.TxnIntents
	for _, d := range ds {
		l.rt.notify(d)
		if l.recorded[d.Txn] {
			delete(l.recorded, d.Txn)
			forget = append(forget, d.Txn)
		}
		ks := l.parts[d.Txn]
		delete(l.parts, d.Txn)
		if len(ks) > 0 {
			intents = append(intents, txnIntents(d, ks))
		}
	}
	if len(intents) > 0 {
		ctx, cancel := context.WithTimeout(l.rt.n.stopCtx, l.rt.n.cfg.RequestTimeout)
		if err := l.rt.db.ResolveTxnIntents(ctx, intents); err != nil {
			// Readers resolve them by the status table meanwhile.
			l.rt.n.log.Warn("hierarchy: resolving intents failed", "transactions", len(intents), "err", err)
		}
		cancel()
	}
	// Queued after the record's write: the writer keeps the order.
	for _, t := range forget {
		l.rt.records.queue(recordOp{txn: t})
	}
}

// txnIntents is what resolves d's intents at ks.
func txnIntents(d hierarchy.Decision, ks [][]byte) client.TxnIntents {
	t := client.TxnIntents{StartTs: uint64(d.Txn), Keys: ks}
	if d.Commit {
		t.CommitTs = d.TS
	}
	return t
}

// lookup reads the status table for overdue parts: a decided one is
// applied; one older than HierarchyTxnAgeMax is aborted first (its
// decider will not commit it any more, and its vote may be lost for good
// with a dead leaf).
func (l *hierLoop) lookup(txns []hierarchy.TxnID) {
	if len(txns) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(l.rt.n.stopCtx, l.rt.n.cfg.RequestTimeout)
	defer cancel()
	starts := make([]uint64, len(txns))
	for i, t := range txns {
		starts[i] = uint64(t)
	}
	decided, err := l.rt.db.LookupTxns(ctx, starts)
	if err != nil {
		l.rt.n.log.Warn("hierarchy: status lookup failed", "err", err)
		return
	}
	var abort []client.TxnDecision
	for _, t := range txns {
		c, ok := decided[uint64(t)]
		switch {
		case ok:
			l.v.Decided(hierarchy.Decision{Txn: t, Commit: c != 0, TS: c})
		case tooOld(t):
			abort = append(abort, client.TxnDecision{StartTs: uint64(t)})
		}
	}
	if len(abort) == 0 {
		return
	}
	held, recorded, err := l.rt.db.DecideTxns(ctx, abort)
	for i, h := range held {
		if recorded[i] {
			l.rt.metrics.add(&l.rt.metrics.agedAborts, 1)
			l.v.Decided(hierarchy.Decision{Txn: hierarchy.TxnID(h.StartTs), Commit: h.Committed, TS: h.CommitTs})
		}
	}
	if err != nil {
		l.rt.n.log.Warn("hierarchy: aborting overdue transactions failed", "err", err)
	}
}

// hierDecisionProto and back.
func hierDecisionToProto(d hierarchy.Decision) *rpcpb.HierDecision {
	return &rpcpb.HierDecision{Txn: uint64(d.Txn), Commit: d.Commit, Ts: d.TS}
}

func hierDecisionFromProto(d *rpcpb.HierDecision) hierarchy.Decision {
	return hierarchy.Decision{Txn: hierarchy.TxnID(d.GetTxn()), Commit: d.GetCommit(), TS: d.GetTs()}
}

func hierMessageToProto(m hierarchy.Message) *rpcpb.HierMessage {
	p := &rpcpb.HierMessage{Kind: uint32(m.Kind), From: int32(m.From), To: int32(m.To), Node: uint64(m.Node),
		Client: uint64(m.Client), Watermark: m.Watermark, Ts: m.TS, Result: hierDecisionToProto(m.Result)}
	for _, v := range m.Votes {
		pv := &rpcpb.HierVote{Txn: uint64(v.Txn), Client: uint64(v.Client), Snapshot: v.Snapshot, Ok: v.OK, Ts: v.TS, Steps: v.Steps}
		for _, nd := range v.Nodes {
			pv.Nodes = append(pv.Nodes, uint64(nd))
		}
		p.Votes = append(p.Votes, pv)
	}
	for _, d := range m.Decisions {
		p.Decisions = append(p.Decisions, hierDecisionToProto(d))
	}
	return p
}

func hierMessageFromProto(p *rpcpb.HierMessage) hierarchy.Message {
	m := hierarchy.Message{Kind: hierarchy.MsgKind(p.GetKind()), From: hierarchy.ValidatorID(p.GetFrom()), To: hierarchy.ValidatorID(p.GetTo()),
		Node: hierarchy.NodeID(p.GetNode()), Client: hierarchy.ClientID(p.GetClient()), Watermark: p.GetWatermark(), TS: p.GetTs()}
	if p.Result != nil {
		m.Result = hierDecisionFromProto(p.Result)
	}
	for _, pv := range p.GetVotes() {
		v := hierarchy.Vote{Txn: hierarchy.TxnID(pv.GetTxn()), Client: hierarchy.ClientID(pv.GetClient()), Snapshot: pv.GetSnapshot(),
			OK: pv.GetOk(), TS: pv.GetTs(), Steps: pv.GetSteps()}
		for _, nd := range pv.GetNodes() {
			v.Nodes = append(v.Nodes, hierarchy.NodeID(nd))
		}
		m.Votes = append(m.Votes, v)
	}
	for _, d := range p.GetDecisions() {
		m.Decisions = append(m.Decisions, hierDecisionFromProto(d))
	}
	return m
}

// mergeReady appends b to a, in order.
func mergeReady(a, b hierarchy.Ready) hierarchy.Ready {
	a.Parts = append(a.Parts, b.Parts...)
	a.Decisions = append(a.Decisions, b.Decisions...)
	a.Messages = append(a.Messages, b.Messages...)
	a.Resolve = append(a.Resolve, b.Resolve...)
	a.Lookups = append(a.Lookups, b.Lookups...)
	return a
}
