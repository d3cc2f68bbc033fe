package hierarchy

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"
)

// DefaultResendAfter is the default Config.ResendAfter.
const DefaultResendAfter = time.Second

// Validator is one validator of the tree, leaf or inner: a deterministic
// state machine. Inputs: Propose and Observe (leaves, from the node), Step
// (messages), Decided (a decision found in the status table), Tick (time).
// Output: Ready. It starts no goroutine, reads no clock and does no I/O, so
// one seed replays one history (sim_test.go).
//
// A Validator is not safe for concurrent use: the caller serializes calls,
// as the thesis's validators validate one transaction at a time (issue 9
// item 6 asks for more cores; that is the caller's sharding, later).
//
// Rejected designs: a part that meets a hold waits for it instead of
// failing (fewer aborts, but waits across leaves can form cycles that no
// one leaf sees, which needs a distributed deadlock detector; the thesis
// fails at once too); the decider checks the merged keys again (the
// thesis's timestamp variant; redundant once leaves learn every commit
// timestamp, and it would make a decision depend on the decider's memory,
// so a restarted decider could decide otherwise); a restarted inner
// validator asks its children to send again at once (a MsgResend: a
// decision lost in a crash can leave some leaves with nothing to send, so
// overdue leaves must fall back on the status table anyway, which covers
// the restart too).
type Validator struct {
	cfg  Config
	tree *Tree
	id   ValidatorID
	// now is the time of the last Tick; batches opened by later inputs are
	// stamped with it.
	now time.Duration

	// Leaf state (3.2.5.A, 3.3).

	// clock is the largest timestamp this leaf has issued or observed.
	// Invariant: it never decreases; every timestamp issued is above it at
	// the time and becomes it.
	clock uint64
	// latest maps a key to the highest committed version this leaf knows.
	// A key absent counts as latestFloor. Invariant: every value is above
	// latestFloor; len(latest) <= cfg.LatestKeysMax.
	latest      map[string]uint64
	latestFloor uint64
	// holds are the keys of pending parts that passed their check: a
	// pending writer excludes every other part touching the key, a pending
	// reader excludes writers. Invariant: a key's holds belong to parts in
	// pending with OK set.
	holds map[string]*hold
	// pending are the parts voted up and not yet decided.
	// Invariant: len(pending) <= cfg.PendingMax.
	pending map[TxnID]*pendingPart
	// nextScan is when Tick next looks for pending parts to send again.
	nextScan time.Duration
	// ticked is set by the first Tick, which dates what New recovered.
	ticked bool

	// Inner state (3.2.5.B).

	// running are the transactions still waiting for votes of children.
	running map[TxnID]*running
	// held (timestamp variant) are committing decisions (at the decider) or
	// successful votes (below it) waiting for the stable timestamp to pass
	// their timestamp, sorted by timestamp.
	held []*running
	// watermarks are the children's promises (timestamp variant): child c
	// sends no vote at or below watermarks[c] any more.
	watermarks map[ValidatorID]uint64
	// raiseSent is the highest MsgRaise sent to each child.
	raiseSent map[ValidatorID]uint64
	// raiseWanted is the watermark the parent asked for (0: none).
	raiseWanted uint64

	// Outboxes.
	up    batch[Vote]
	nodes map[NodeID]*batch[Decision]
	rd    Ready

	counts Counts
}

type hold struct {
	writer  TxnID // 0: none
	readers []TxnID
}

type pendingPart struct {
	PartResult
	lastSent time.Duration
}

type running struct {
	vote Vote
	// need are the children whose votes are awaited, got those received.
	need, got []ValidatorID
	lastVote  time.Duration
	decider   ValidatorID
}

type batch[T any] struct {
	items    []T
	openedAt time.Duration
}

// New makes validator cfg.ID of cfg.Tree. A restarted validator gets what
// it recovered (a zero Recovery for a new one; inner validators recover
// nothing: their children send again what is undecided). A leaf's
// recovered parts are voted up again at once.
func New(cfg Config, rec Recovery) (*Validator, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v := &Validator{
		cfg:   cfg,
		tree:  cfg.Tree,
		id:    cfg.ID,
		nodes: map[NodeID]*batch[Decision]{},
	}
	if v.isLeaf() {
		v.latest = map[string]uint64{}
		v.holds = map[string]*hold{}
		v.pending = map[TxnID]*pendingPart{}
		v.clock = rec.ClockFloor
		v.latestFloor = rec.LatestFloor
		prs := slices.Clone(rec.Pending)
		sort.Slice(prs, func(i, j int) bool { return prs[i].TS < prs[j].TS })
		if len(prs) > cfg.PendingMax {
			return nil, fmt.Errorf("%w: %d recovered parts, pending max %d", ErrInvalidArgument, len(prs), cfg.PendingMax)
		}
		for _, pr := range prs {
			if err := v.checkPart(pr.Part); err != nil {
				return nil, fmt.Errorf("recovered part: %w", err)
			}
			if err := v.checkKeys(pr.Part); err != nil {
				return nil, fmt.Errorf("recovered part: %w", err)
			}
			if d, _ := v.tree.Decider(pr.Part.Nodes); d == v.id {
				return nil, fmt.Errorf("%w: recovered part of txn %d is local: its decision is in the status table", ErrInvalidArgument, pr.Part.Txn)
			}
			v.clock = max(v.clock, pr.TS)
			if pr.OK {
				v.takeHolds(pr.Part)
			}
			v.pending[pr.Part.Txn] = &pendingPart{PartResult: pr}
			v.enqueueUp(pr.vote())
		}
	} else {
		if len(rec.Pending) > 0 || rec.ClockFloor != 0 || rec.LatestFloor != 0 {
			return nil, fmt.Errorf("%w: inner validator %d recovers nothing", ErrInvalidArgument, cfg.ID)
		}
		v.running = map[TxnID]*running{}
		v.watermarks = map[ValidatorID]uint64{}
		v.raiseSent = map[ValidatorID]uint64{}
	}
	return v, nil
}

func (v *Validator) isLeaf() bool { return v.tree.IsLeaf(v.id) }

// ID is the validator's place in its tree.
func (v *Validator) ID() ValidatorID { return v.id }

// Clock is a leaf's clock (0 for an inner validator).
func (v *Validator) Clock() uint64 { return v.clock }

// Counts are the messages this validator sent and what it decided.
func (v *Validator) Counts() Counts { return v.counts }

// PendingParts is a leaf's pending parts, in transaction order (nil at an
// inner validator): after New, the recovered ones.
func (v *Validator) PendingParts() []PartResult {
	var out []PartResult
	for _, pp := range v.pending {
		out = append(out, pp.PartResult)
	}
	slices.SortFunc(out, func(a, b PartResult) int { return cmp.Compare(a.Part.Txn, b.Part.Txn) })
	return out
}

// PendingCount is the number of parts (leaf) or transactions (inner) held.
func (v *Validator) PendingCount() int {
	if v.isLeaf() {
		return len(v.pending)
	}
	return len(v.running) + len(v.held)
}

// Ready returns what the caller must do now (see Ready) and forgets it.
func (v *Validator) Ready() Ready {
	r := v.rd
	v.rd = Ready{}
	return r
}

// HasReady reports whether Ready has something.
func (v *Validator) HasReady() bool { return !v.rd.Empty() }

// Observe tells a leaf that its node served a read at ts: every timestamp
// the leaf issues from now on is above ts, so no commit lands at or below a
// snapshot already read (see doc.go, "Timestamps in Canopy").
func (v *Validator) Observe(ts uint64) {
	if !v.isLeaf() {
		panic(fmt.Sprintf("hierarchy: Observe on inner validator %d", v.id))
	}
	v.clock = max(v.clock, ts)
}

// checkPart validates a part's shape. Errors wrap ErrInvalidArgument.
func (v *Validator) checkPart(p Part) error {
	switch {
	case p.Txn == 0:
		return fmt.Errorf("%w: part without a transaction ID", ErrInvalidArgument)
	case len(p.Nodes) == 0:
		return fmt.Errorf("%w: txn %d: part without nodes", ErrInvalidArgument, p.Txn)
	}
	for i, n := range p.Nodes {
		if i > 0 && n <= p.Nodes[i-1] {
			return fmt.Errorf("%w: txn %d: nodes %v not sorted and unique", ErrInvalidArgument, p.Txn, p.Nodes)
		}
		if _, ok := v.tree.Leaf(n); !ok {
			return fmt.Errorf("%w: txn %d: node %d is not in tree %s", ErrInvalidArgument, p.Txn, n, v.tree)
		}
	}
	if !slices.Contains(p.Nodes, v.tree.Node(v.id)) {
		return fmt.Errorf("%w: txn %d: nodes %v leave out this leaf's node %d", ErrInvalidArgument, p.Txn, p.Nodes, v.tree.Node(v.id))
	}
	return nil
}

// checkKeys checks a part's keys against the limits. Errors wrap
// ErrInvalidArgument.
func (v *Validator) checkKeys(p Part) error {
	switch n := len(p.Reads) + len(p.Writes); {
	case n == 0:
		return fmt.Errorf("%w: txn %d: part without keys", ErrInvalidArgument, p.Txn)
	case n > v.cfg.KeysPerPartMax:
		return fmt.Errorf("%w: txn %d: part has %d keys, max %d", ErrInvalidArgument, p.Txn, n, v.cfg.KeysPerPartMax)
	}
	return nil
}

// nextTS is the timestamp a leaf issues above base (3.3.1, 3.3.2).
func (v *Validator) nextTS(base uint64) uint64 {
	if v.cfg.Variant == Locking {
		return base + 1
	}
	n := uint64(v.tree.LeafCount())
	slot := uint64(v.tree.Slot(v.id)) % n
	t := base + 1
	return t + (slot+n-t%n)%n
}

// leafWatermark is a leaf's promise: every vote it sends from now on has a
// timestamp above it (timestamp variant; its next timestamp minus one).
func (v *Validator) leafWatermark() uint64 { return v.nextTS(v.clock) - 1 }

func (v *Validator) latestOf(k string) uint64 { return max(v.latest[k], v.latestFloor) }

// check is the leaf's validation of a part (3.2.5.A): no key it touches has
// a version newer than the snapshot, and no pending part conflicts (the
// thesis's locks; Canopy keeps them in the timestamp variant too, see
// doc.go).
func (v *Validator) check(p Part) bool {
	if p.Conflict {
		return false
	}
	for _, k := range p.Reads {
		if h := v.holds[k]; h != nil && h.writer != 0 {
			return false
		}
		if v.latestOf(k) > p.Snapshot {
			return false
		}
	}
	for _, k := range p.Writes {
		if h := v.holds[k]; h != nil && (h.writer != 0 || len(h.readers) > 0) {
			return false
		}
		if v.latestOf(k) > p.Snapshot {
			return false
		}
	}
	return true
}

func (v *Validator) takeHolds(p Part) {
	for _, k := range p.Reads {
		h := v.holds[k]
		if h == nil {
			h = &hold{}
			v.holds[k] = h
		}
		h.readers = append(h.readers, p.Txn)
	}
	for _, k := range p.Writes {
		h := v.holds[k]
		if h == nil {
			h = &hold{}
			v.holds[k] = h
		}
		if h.writer != 0 {
			panic(fmt.Sprintf("hierarchy: txn %d takes key %q written by pending txn %d", p.Txn, k, h.writer))
		}
		h.writer = p.Txn
	}
}

func (v *Validator) dropHolds(p Part) {
	for _, k := range p.Reads {
		if h := v.holds[k]; h != nil {
			if i := slices.Index(h.readers, p.Txn); i >= 0 {
				h.readers = slices.Delete(h.readers, i, i+1)
			}
			if h.writer == 0 && len(h.readers) == 0 {
				delete(v.holds, k)
			}
		}
	}
	for _, k := range p.Writes {
		if h := v.holds[k]; h != nil && h.writer == p.Txn {
			h.writer = 0
			if len(h.readers) == 0 {
				delete(v.holds, k)
			}
		}
	}
}

func (v *Validator) setLatest(k string, ts uint64) {
	if ts <= v.latestOf(k) {
		return
	}
	v.latest[k] = ts
	if len(v.latest) <= v.cfg.LatestKeysMax {
		return
	}
	// Drop the lower half and raise the floor to the highest dropped.
	vals := make([]uint64, 0, len(v.latest))
	for _, x := range v.latest {
		vals = append(vals, x)
	}
	slices.Sort(vals)
	cut := vals[len(vals)/2-1]
	for key, x := range v.latest {
		if x <= cut {
			delete(v.latest, key)
		}
	}
	v.latestFloor = max(v.latestFloor, cut)
}

// Propose hands a leaf the part a client's commit request brought to its
// node (3.2.4). The leaf issues the part's timestamp and checks it; a
// transaction local to the node is decided at once, any other is voted up.
//
// Errors wrap ErrInvalidArgument or ErrOverloaded (retryable):
//   - a malformed transaction ID or node list, or a second part of a
//     transaction pending here (a retry: wait for the decision): nothing
//     changed;
//   - a part over a limit (no keys or more than KeysPerPartMax, or
//     PendingMax parts pending): the leaf aborts the transaction itself,
//     which it may since a commit needs its vote (Ready holds the durable
//     decision, the client's result and a failing vote, so that the other
//     nodes learn of it from the decider, or else from the status table).
func (v *Validator) Propose(p Part) error { return v.propose(p, nil) }

// Check is a leaf's check of p (3.2.5.A: its keys' holds and latest
// versions against its snapshot) without any change to the validator, so
// that a caller may check the parts it took together on several cores
// and then admit them in order with ProposeChecked. Checks may run
// concurrently with each other, and with nothing else. False at an inner
// validator.
func (v *Validator) Check(p Part) bool {
	return v.isLeaf() && v.check(p)
}

// ProposeChecked is Propose with p's check already made: ok is what
// Check(p) returned. Between that Check and this call the validator may
// have taken parts whose keys (reads and writes) are disjoint from p's,
// by Propose or ProposeChecked, and observes (the check does not read the
// clock), and no other input. That keeps ok true to
// the state: a part changes the holds and versions of its own keys only
// (a local one may also raise the latest-version floor, which stands in
// for versions dropped from the table, while p's keys' versions were known
// when it was checked). Only the timestamp and the admission (holds,
// pending set, PendingMax) depend on the order, and they are taken here.
func (v *Validator) ProposeChecked(p Part, ok bool) error { return v.propose(p, &ok) }

func (v *Validator) propose(p Part, checked *bool) error {
	if !v.isLeaf() {
		return fmt.Errorf("%w: validator %d is not a leaf", ErrInvalidArgument, v.id)
	}
	if err := v.checkPart(p); err != nil {
		return err
	}
	if _, dup := v.pending[p.Txn]; dup {
		return fmt.Errorf("%w: txn %d already has a part pending at node %d", ErrInvalidArgument, p.Txn, v.tree.Node(v.id))
	}
	decider, _ := v.tree.Decider(p.Nodes)
	refusal := v.checkKeys(p)
	if refusal == nil && decider != v.id && len(v.pending) >= v.cfg.PendingMax {
		refusal = fmt.Errorf("%w: %d parts pending at node %d", ErrOverloaded, len(v.pending), v.tree.Node(v.id))
	}
	if refusal != nil {
		v.counts.Parts++
		v.counts.Refused++
		vt := Vote{Txn: p.Txn, Client: p.Client, Snapshot: p.Snapshot, Nodes: p.Nodes, OK: false}
		v.decide(vt, 2)
		if decider != v.id {
			v.enqueueUp(vt)
		}
		return refusal
	}
	v.counts.Parts++
	ts := v.nextTS(max(v.clock, p.Snapshot))
	v.clock = ts
	var ok bool
	if checked != nil {
		ok = *checked
	} else {
		ok = v.check(p)
	}
	pr := PartResult{Part: p, OK: ok, TS: ts}
	if decider == v.id {
		// A local transaction (3.2.5.A): decided here, at once; it holds
		// nothing, so only the versions move (the clock already has ts).
		v.decide(pr.vote(), 2)
		if ok {
			for _, k := range p.Writes {
				v.setLatest(k, ts)
			}
		}
		return nil
	}
	if ok {
		v.takeHolds(p)
	}
	v.pending[p.Txn] = &pendingPart{PartResult: pr, lastSent: v.now}
	v.rd.Parts = append(v.rd.Parts, pr)
	v.enqueueUp(pr.vote())
	return nil
}

func (pr PartResult) vote() Vote {
	return Vote{Txn: pr.Part.Txn, Client: pr.Part.Client, Snapshot: pr.Part.Snapshot, Nodes: pr.Part.Nodes, OK: pr.OK, TS: pr.TS}
}

// Decided tells a leaf a decision its caller found in the status table for
// a pending part (after Ready.Lookups named it, or at any time): the leaf
// applies it as if it had come down the tree. A decision for a part not
// pending is ignored.
func (v *Validator) Decided(d Decision) {
	if !v.isLeaf() {
		panic(fmt.Sprintf("hierarchy: Decided on inner validator %d", v.id))
	}
	v.applyDecision(d, false)
}

// applyDecision ends a pending part at a leaf (3.2.5.B: the node commits or
// discards the intents, the leaf releases the holds and moves its clock).
// fromTree is false for a decision read from the status table.
func (v *Validator) applyDecision(d Decision, fromTree bool) {
	pp := v.pending[d.Txn]
	if pp == nil {
		v.counts.DuplicateDecisions++
		return
	}
	delete(v.pending, d.Txn)
	if pp.OK {
		v.dropHolds(pp.Part)
	}
	if d.Commit {
		if !pp.OK {
			panic(fmt.Sprintf("hierarchy: txn %d committed though its part at node %d failed", d.Txn, v.tree.Node(v.id)))
		}
		if d.TS < pp.TS {
			panic(fmt.Sprintf("hierarchy: txn %d committed at %d below its part's timestamp %d", d.Txn, d.TS, pp.TS))
		}
		if v.cfg.Variant == Timestamps && fromTree && d.TS > v.leafWatermark() {
			panic(fmt.Sprintf("hierarchy: txn %d released at %d above leaf %d's watermark %d", d.Txn, d.TS, v.id, v.leafWatermark()))
		}
		for _, k := range pp.Part.Writes {
			v.setLatest(k, d.TS)
		}
		// 3.3.1: the clock moves forward with the decisions from above, so
		// that a transaction validated here later commits after this one.
		v.clock = max(v.clock, d.TS)
	}
	v.rd.Resolve = append(v.rd.Resolve, d)
}

// Step hands the validator a message addressed to it (MsgVotes, MsgRaise)
// or, for a leaf, to its node (MsgDecisions). Errors wrap
// ErrInvalidArgument: a message that does not belong here (a bug or a
// misrouted message); nothing changed.
func (v *Validator) Step(m Message) error {
	switch m.Kind {
	case MsgDecisions:
		if !v.isLeaf() || m.Node != v.tree.Node(v.id) {
			return fmt.Errorf("%w: decisions for node %d at validator %d", ErrInvalidArgument, m.Node, v.id)
		}
		for _, d := range m.Decisions {
			v.applyDecision(d, true)
		}
		return nil
	case MsgVotes:
		if m.To != v.id || !v.tree.Valid(m.From) || v.tree.Parent(m.From) != v.id {
			return fmt.Errorf("%w: votes from v%d to v%d at v%d", ErrInvalidArgument, m.From, m.To, v.id)
		}
		for _, vt := range m.Votes {
			if err := v.checkVote(m.From, vt); err != nil {
				return err
			}
		}
		for _, vt := range m.Votes {
			v.vote(m.From, vt)
		}
		if v.cfg.Variant == Timestamps {
			v.watermarks[m.From] = max(v.watermarks[m.From], m.Watermark)
			v.release()
		}
		return nil
	case MsgRaise:
		if m.To != v.id || m.From != v.tree.Parent(v.id) {
			return fmt.Errorf("%w: raise from v%d at v%d", ErrInvalidArgument, m.From, v.id)
		}
		if v.cfg.Variant != Timestamps {
			return fmt.Errorf("%w: raise in the %s variant", ErrInvalidArgument, v.cfg.Variant)
		}
		if v.isLeaf() {
			v.clock = max(v.clock, m.TS)
			v.flushUp(true)
			return nil
		}
		v.raiseWanted = max(v.raiseWanted, m.TS)
		v.raiseChildren(m.TS)
		v.release()
		return nil
	}
	return fmt.Errorf("%w: message %v at validator %d", ErrInvalidArgument, m.Kind, v.id)
}

// checkVote rejects a vote that cannot come from child from.
func (v *Validator) checkVote(from ValidatorID, vt Vote) error {
	decider, ok := v.tree.Decider(vt.Nodes)
	if !ok || !v.tree.isAncestorOrSelf(decider, v.id) || !slices.ContainsFunc(vt.Nodes, func(n NodeID) bool { return v.tree.covers(from, n) }) {
		return fmt.Errorf("%w: txn %d with nodes %v does not pass v%d -> v%d", ErrInvalidArgument, vt.Txn, vt.Nodes, from, v.id)
	}
	return nil
}

// vote takes one child's vote at an inner validator.
func (v *Validator) vote(from ValidatorID, vt Vote) {
	decider, _ := v.tree.Decider(vt.Nodes)
	v.counts.VotesIn++
	r := v.running[vt.Txn]
	if r == nil {
		r = &running{vote: vt, decider: decider}
		r.vote.OK, r.vote.TS, r.vote.Steps = true, 0, 0
		for _, n := range vt.Nodes {
			if v.tree.covers(v.id, n) {
				if c := v.tree.childToward(v.id, n); !slices.Contains(r.need, c) {
					r.need = append(r.need, c)
				}
			}
		}
		v.running[vt.Txn] = r
	}
	r.lastVote = v.now
	if slices.Contains(r.got, from) {
		v.counts.DuplicateVotes++
		return
	}
	r.got = append(r.got, from)
	r.vote.OK = r.vote.OK && vt.OK
	r.vote.TS = max(r.vote.TS, vt.TS)
	r.vote.Steps = max(r.vote.Steps, vt.Steps)
	if len(r.got) < len(r.need) {
		return
	}
	delete(v.running, vt.Txn)
	switch {
	case r.decider == v.id && r.vote.OK && v.cfg.Variant == Timestamps:
		// Durable now, told when the stable timestamp passes it.
		v.rd.Decisions = append(v.rd.Decisions, Decision{Txn: r.vote.Txn, Commit: true, TS: r.vote.TS})
		v.hold(r)
	case r.decider == v.id:
		v.decide(r.vote, 2+r.vote.Steps)
	case r.vote.OK && v.cfg.Variant == Timestamps:
		v.hold(r)
	default:
		v.enqueueUp(r.vote)
	}
}

func (v *Validator) hold(r *running) {
	i := sort.Search(len(v.held), func(i int) bool { return v.held[i].vote.TS > r.vote.TS })
	v.held = slices.Insert(v.held, i, r)
	v.release()
}

// stable is the timestamp below which no child will send a vote any more
// (the thesis's calculate_stable_timestamp, over every child).
func (v *Validator) stable() uint64 {
	s := uint64(0)
	for i, c := range v.tree.Children(v.id) {
		if w := v.watermarks[c]; i == 0 || w < s {
			s = w
		}
	}
	return s
}

// innerWatermark is an inner validator's promise to its parent: its stable
// timestamp (what completes later has a vote from a child above it), but
// below anything still held, which may go up after this message.
func (v *Validator) innerWatermark() uint64 {
	w := v.stable()
	if len(v.held) > 0 && v.held[0].vote.TS <= w {
		w = v.held[0].vote.TS - 1
	}
	return w
}

// release lets held items at or below the stable timestamp go, in
// timestamp order, and answers the parent's raise once it is met.
func (v *Validator) release() {
	if v.cfg.Variant != Timestamps || v.isLeaf() {
		return
	}
	s := v.stable()
	for len(v.held) > 0 && v.held[0].vote.TS <= s {
		// Off the list first: a batch this fills carries a watermark that
		// must only stay below what is still held.
		r := v.held[0]
		v.held = v.held[1:]
		if r.decider == v.id {
			v.tell(Decision{Txn: r.vote.Txn, Commit: true, TS: r.vote.TS}, r.vote, 2+r.vote.Steps)
		} else {
			v.enqueueUp(r.vote)
		}
	}
	if v.raiseWanted != 0 && s >= v.raiseWanted && v.id != v.tree.Root() {
		v.raiseWanted = 0
		v.flushUp(true)
	}
}

// raiseChildren asks every child whose watermark is below ts to raise it.
func (v *Validator) raiseChildren(ts uint64) {
	for _, c := range v.tree.Children(v.id) {
		if v.watermarks[c] < ts && v.raiseSent[c] < ts {
			v.raiseSent[c] = ts
			v.counts.RaiseMessages++
			v.rd.Messages = append(v.rd.Messages, Message{Kind: MsgRaise, From: v.id, To: c, TS: ts})
		}
	}
}

// decide makes and tells a decision at once (a leaf's local transaction,
// an abort, or any decision of the locking variant).
func (v *Validator) decide(vt Vote, steps float64) {
	d := Decision{Txn: vt.Txn, Commit: vt.OK}
	if d.Commit {
		d.TS = vt.TS
	}
	v.rd.Decisions = append(v.rd.Decisions, d)
	v.tell(d, vt, steps)
}

// tell sends a durable decision to the client and the involved nodes.
func (v *Validator) tell(d Decision, vt Vote, steps float64) {
	v.counts.Decided++
	if d.Commit {
		v.counts.Committed++
	}
	v.counts.Steps += steps
	v.counts.ResultMessages++
	v.rd.Messages = append(v.rd.Messages, Message{Kind: MsgResult, From: v.id, Client: vt.Client, Result: d})
	if v.isLeaf() {
		// A local transaction: the leaf's own node; no message.
		v.rd.Resolve = append(v.rd.Resolve, d)
		return
	}
	for _, n := range vt.Nodes {
		b := v.nodes[n]
		if b == nil {
			b = &batch[Decision]{}
			v.nodes[n] = b
		}
		if len(b.items) == 0 {
			b.openedAt = v.now
		}
		b.items = append(b.items, d)
		if len(b.items) >= v.cfg.NodeBatch.SizeMax {
			v.flushNode(n)
		}
	}
}

func (v *Validator) enqueueUp(vt Vote) {
	if v.id == v.tree.Root() {
		panic(fmt.Sprintf("hierarchy: the root has no parent to send txn %d to", vt.Txn))
	}
	if len(v.up.items) == 0 {
		v.up.openedAt = v.now
	}
	v.up.items = append(v.up.items, vt)
	if len(v.up.items) >= v.cfg.ValidatorBatch.SizeMax {
		v.flushUp(false)
	}
}

// flushUp sends the queued votes to the parent; with force, also when
// there are none (to carry the watermark).
func (v *Validator) flushUp(force bool) {
	if len(v.up.items) == 0 && !force {
		return
	}
	m := Message{Kind: MsgVotes, From: v.id, To: v.tree.Parent(v.id), Votes: v.up.items}
	v.up.items = nil
	if k := len(m.Votes); k > 0 {
		// Each vote's share of this step: one message carries k of them
		// (the thesis's H/B, counts.go).
		for i := range m.Votes {
			m.Votes[i].Steps += 1 / float64(k)
		}
		v.counts.VoteMessages++
		v.counts.Votes += k
	} else {
		v.counts.WatermarkMessages++
	}
	if v.cfg.Variant == Timestamps {
		if v.isLeaf() {
			m.Watermark = v.leafWatermark()
		} else {
			m.Watermark = v.innerWatermark()
		}
	}
	v.rd.Messages = append(v.rd.Messages, m)
}

func (v *Validator) flushNode(n NodeID) {
	b := v.nodes[n]
	if b == nil || len(b.items) == 0 {
		return
	}
	v.counts.DecisionMessages++
	v.counts.Decisions += len(b.items)
	v.rd.Messages = append(v.rd.Messages, Message{Kind: MsgDecisions, From: v.id, Node: n, Decisions: b.items})
	b.items = nil
}

// Tick tells the validator the time (a monotonic duration since any fixed
// origin); call it right after New, then at least by NextDeadline. It sends the batches whose timeout has passed; a leaf votes
// again the parts that have waited ResendAfter for their decision and asks
// its caller to look them up (Ready.Lookups); an inner validator forgets
// transactions whose votes stopped coming (their children will send again)
// and, in the timestamp variant, asks lagging children to raise their
// watermarks.
func (v *Validator) Tick(now time.Duration) {
	if now < v.now {
		panic(fmt.Sprintf("hierarchy: time went back from %v to %v", v.now, now))
	}
	v.now = now
	if !v.ticked {
		// What New recovered (and voted up) was sent now, not at time 0.
		v.ticked = true
		for _, pp := range v.pending {
			pp.lastSent = now
		}
		v.up.openedAt = now
		v.nextScan = now + v.cfg.ResendAfter/2
	}
	if len(v.up.items) > 0 && now-v.up.openedAt >= v.cfg.ValidatorBatch.Timeout {
		v.flushUp(false)
	}
	var due []NodeID
	for n, b := range v.nodes {
		if len(b.items) > 0 && now-b.openedAt >= v.cfg.NodeBatch.Timeout {
			due = append(due, n)
		}
	}
	slices.Sort(due)
	for _, n := range due {
		v.flushNode(n)
	}
	if now >= v.nextScan {
		v.nextScan = now + v.cfg.ResendAfter/2
		v.scan()
	}
	if v.cfg.Variant == Timestamps && !v.isLeaf() {
		if len(v.held) > 0 && v.held[0].vote.TS > v.stable() {
			v.raiseChildren(v.held[len(v.held)-1].vote.TS)
		}
		if v.raiseWanted != 0 {
			v.raiseChildren(v.raiseWanted)
		}
	}
}

func (v *Validator) scan() {
	if v.isLeaf() {
		var again []*pendingPart
		for _, pp := range v.pending {
			if v.now-pp.lastSent >= v.cfg.ResendAfter {
				again = append(again, pp)
			}
		}
		sort.Slice(again, func(i, j int) bool { return again[i].TS < again[j].TS })
		for _, pp := range again {
			pp.lastSent = v.now
			v.rd.Lookups = append(v.rd.Lookups, pp.Part.Txn)
			v.counts.Resent++
			v.enqueueUp(pp.vote())
		}
		return
	}
	for txn, r := range v.running {
		if v.now-r.lastVote >= 2*v.cfg.ResendAfter {
			delete(v.running, txn)
			v.counts.Forgotten++
		}
	}
	// A raise may have been lost with a crashed child: ask again.
	clear(v.raiseSent)
}

// NextDeadline is when the caller should Tick next (for a timer), and
// false if nothing waits on time but the periodic scan.
func (v *Validator) NextDeadline() (time.Duration, bool) {
	d, ok := v.nextScan, len(v.pending) > 0 || len(v.running) > 0 || len(v.held) > 0
	if len(v.up.items) > 0 {
		d, ok = min(d, v.up.openedAt+v.cfg.ValidatorBatch.Timeout), true
	}
	for _, b := range v.nodes {
		if len(b.items) > 0 {
			d, ok = min(d, b.openedAt+v.cfg.NodeBatch.Timeout), true
		}
	}
	return d, ok
}
