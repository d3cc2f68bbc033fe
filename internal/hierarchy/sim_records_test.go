package hierarchy

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"
)

// Lost part records, in the simulation (seeds with seed%3 == 0).
//
// kvserver writes a leaf's part records off the leaf's loop, unsynced, after
// the part's intents are applied (kvserver/hierarchy_record.go), so a crash
// may take a record whose intents and vote survive: the restarted leaf then
// knows nothing of that part. The design notes ("Restart: part records")
// argue that this is safe because of four rules kvserver keeps, which
// these seeds model, and the serial oracle then checks:
//
//  1. Age: a decider never commits a transaction older than ageMax (it
//     records ABORTED instead), and a leaf whose lookup finds no decision
//     for a part older than ageMax records ABORTED (HierarchyTxnAgeMax).
//     The status table keeps the first decision (put-unless-exists); one
//     that comes back otherwise is what is told instead (overrides).
//  2. Fence: a restarted leaf takes no part until fence (> ageMax) after
//     its restart, then observes a fresh oracle timestamp
//     (HierarchyLeaseFence): by then every transaction it may have voted
//     for without a record is decided, or too old to commit.
//  3. Storage check: a part that meets another transaction's intent, or a
//     version above its snapshot, on one of its keys fails (Part.Conflict):
//     the leaf no longer holds what the lost part wrote.
//  4. Readers: a read that meets an intent resolves it by the status table,
//     or records ABORTED once its transaction is older than ttl (the
//     client's heartbeat TTL, which may be shorter or longer than ageMax).
//     An orphaned intent (its part's record lost) ends this way; what is
//     left when the run is quiescent is swept the same way.
type simLoss struct {
	pct    int // chance, in percent, that a restart loses a part record
	ageMax time.Duration
	ttl    time.Duration
	fence  time.Duration
	// fenceUntil: a restarted leaf's node takes parts from then on;
	// fenceOpen: it observed a fresh timestamp since.
	fenceUntil map[NodeID]time.Duration
	fenceOpen  map[NodeID]bool
	// decidedBy says who wrote a status entry: the tree (a decider or a
	// leaf deciding a local transaction), "aged" (rule 1) or "reader".
	decidedBy map[TxnID]string

	// noFence and noAge switch rules 2 and 1 off (TestLostRecordRules
	// shows what each prevents).
	noFence, noAge bool

	lost, agedAborts, readerAborts, overridden, fenced, conflicts, swept int
}

func newSimLoss(seed int64) *simLoss {
	rng := rand.New(rand.NewSource(seed + 1_000_003))
	ageMax := time.Duration(30+rng.Intn(120)) * time.Millisecond
	ttl := ageMax/2 + time.Duration(rng.Int63n(int64(ageMax)*3/2))
	return newLoss(30+rng.Intn(61), ageMax, ttl)
}

// newLoss is a loss model with these parameters; the fence is ageMax and
// a millisecond.
func newLoss(pct int, ageMax, ttl time.Duration) *simLoss {
	return &simLoss{pct: pct, ageMax: ageMax, ttl: ttl, fence: ageMax + time.Millisecond,
		fenceUntil: map[NodeID]time.Duration{}, fenceOpen: map[NodeID]bool{}, decidedBy: map[TxnID]string{}}
}

func (l *simLoss) String() string {
	return fmt.Sprintf("records lost %d%%, age max %v, reader ttl %v, fence %v", l.pct, l.ageMax, l.ttl, l.fence)
}

// summary is what the seed's log line adds.
func (l *simLoss) summary() string {
	return fmt.Sprintf("%d records lost, %d aged aborts, %d reader aborts, %d decisions overridden, %d parts fenced, %d storage conflicts, %d intents swept",
		l.lost, l.agedAborts, l.readerAborts, l.overridden, l.fenced, l.conflicts, l.swept)
}

// age is how old txn is now (its ID is its start timestamp, one per
// microsecond of the sim's clock).
func (w *simWorld) age(txn TxnID) time.Duration {
	return w.now - time.Duration(txn)*time.Microsecond
}

// persist records d in the status table, by put-unless-exists, as
// kvserver's leaf loop does (hierarchyLoop.persist): a commit older than
// ageMax is recorded as ABORTED. An entry the tree wrote otherwise is an
// I1 violation; one written by an age rule or a reader overrides d.
func (w *simWorld) persist(d Decision) error {
	l := w.loss
	old, ok := w.status[d.Txn]
	if l == nil {
		if ok && old != d {
			return fmt.Errorf("I1: txn %d decided %v, then %v", d.Txn, old, d)
		}
		w.status[d.Txn] = d
		return nil
	}
	if ok {
		if old != d {
			if l.decidedBy[d.Txn] == "tree" {
				return fmt.Errorf("I1: txn %d decided %v, then %v", d.Txn, old, d)
			}
			l.overridden++
			w.tracef("txn %d decided %v, but the status table holds %v (%s)", d.Txn, d, old, l.decidedBy[d.Txn])
		}
		return nil
	}
	if d.Commit && w.age(d.Txn) > l.ageMax && !l.noAge {
		w.abortAs(d.Txn, "aged")
		l.overridden++
		w.tracef("txn %d decided %v at age %v: recorded ABORTED", d.Txn, d, w.age(d.Txn))
		return nil
	}
	w.status[d.Txn] = d
	l.decidedBy[d.Txn] = "tree"
	return nil
}

// abortAs records ABORTED for txn (no entry may be there).
func (w *simWorld) abortAs(txn TxnID, by string) Decision {
	d := Decision{Txn: txn}
	w.status[txn] = d
	w.loss.decidedBy[txn] = by
	switch by {
	case "aged":
		w.loss.agedAborts++
	case "reader":
		w.loss.readerAborts++
	}
	return d
}

// patch replaces, in what rd sends and resolves, the decisions the status
// table holds otherwise (kvserver's hierLoop.patch).
func (w *simWorld) patch(rd *Ready) {
	if w.loss == nil {
		return
	}
	fix := func(d Decision) Decision {
		if s, ok := w.status[d.Txn]; ok {
			return s
		}
		return d
	}
	for i := range rd.Messages {
		m := &rd.Messages[i]
		switch m.Kind {
		case MsgResult:
			m.Result = fix(m.Result)
		case MsgDecisions:
			ds := make([]Decision, len(m.Decisions))
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

// lookup answers a leaf's lookup of txn: its decision, or ABORTED recorded
// now if it is older than ageMax (rule 1), or nothing.
func (w *simWorld) lookup(txn TxnID) (Decision, bool) {
	if d, ok := w.status[txn]; ok {
		return d, true
	}
	if w.loss != nil && w.age(txn) > w.loss.ageMax {
		w.tracef("lookup: txn %d is %v old: ABORTED", txn, w.age(txn))
		return w.abortAs(txn, "aged"), true
	}
	return Decision{}, false
}

// loseRecords drops, at a leaf's restart, each part record of n with the
// seed's chance; the part's intents stay (they are in the range's Raft
// state, not in the record). It also closes the node to parts for the
// fence.
func (w *simWorld) loseRecords(n *simNode) {
	l := w.loss
	txns := make([]TxnID, 0, len(n.parts))
	for txn := range n.parts {
		txns = append(txns, txn)
	}
	slices.Sort(txns)
	for _, txn := range txns {
		if w.rng.Intn(100) < l.pct {
			delete(n.parts, txn)
			l.lost++
			w.tracef("node %d lost txn %d's part record (intents at %v stay)", n.id, txn, n.writes[txn])
		}
	}
	l.fenceUntil[n.id] = w.now + l.fence
	l.fenceOpen[n.id] = false
}

// leafToLose is the validator a lossy seed crashes instead of id: the
// first live leaf from id on whose node holds part records; false if none
// does (no crash then: one would lose nothing).
func (w *simWorld) leafToLose(id ValidatorID) (ValidatorID, bool) {
	for i := range w.tree.Size() {
		c := ValidatorID((int(id) + i) % w.tree.Size())
		if w.vals[c] != nil && w.tree.IsLeaf(c) && len(w.nodes[w.tree.Node(c)].parts) > 0 {
			return c, true
		}
	}
	return id, false
}

// fenced reports whether n may not take parts yet (rule 2); when the
// fence has passed, n's leaf first observes a fresh timestamp.
func (w *simWorld) fenced(n *simNode, v *Validator) bool {
	l := w.loss
	if l == nil {
		return false
	}
	if until, ok := l.fenceUntil[n.id]; ok && w.now < until && !l.noFence {
		l.fenced++
		return true
	}
	if !l.fenceOpen[n.id] {
		l.fenceOpen[n.id] = true
		v.Observe(w.oracle())
	}
	return false
}

// storageCheck sets p.Conflict if n's storage shows another transaction's
// intent, or a version above p's snapshot, on one of p's keys (rule 3).
func (w *simWorld) storageCheck(n *simNode, p *Part) {
	if w.loss == nil {
		return
	}
	for _, k := range append(slices.Clone(p.Reads), p.Writes...) {
		other, ok := n.intents[k]
		conflict := ok && other != p.Txn
		for _, ver := range n.versions[k] {
			conflict = conflict || ver.ts > p.Snapshot
		}
		if conflict {
			p.Conflict = true
			w.loss.conflicts++
			return
		}
	}
}

// readerMeets is a read of n meeting txn's intent (rule 4): it resolves
// the intent by the status table, or aborts txn once it is older than
// ttl. It reports whether the intent is gone.
func (w *simWorld) readerMeets(n *simNode, txn TxnID) bool {
	if w.loss == nil {
		return false
	}
	d, ok := w.status[txn]
	if !ok {
		if w.age(txn) <= w.loss.ttl {
			return false
		}
		d = w.abortAs(txn, "reader")
	}
	w.tracef("a reader at node %d resolves txn %d's intents: %v", n.id, txn, d)
	w.resolve(n, d)
	return true
}

// sweep ends, once the run is quiescent, the intents no reader met, as a
// reader after ttl would.
func (w *simWorld) sweep() {
	if w.loss == nil {
		return
	}
	ids := make([]NodeID, 0, len(w.nodes))
	for id := range w.nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		n := w.nodes[id]
		var txns []TxnID
		for _, txn := range n.intents {
			if !slices.Contains(txns, txn) {
				txns = append(txns, txn)
			}
		}
		slices.Sort(txns)
		for _, txn := range txns {
			d, ok := w.status[txn]
			if !ok {
				d = w.abortAs(txn, "reader")
			}
			w.loss.swept += len(n.writes[txn])
			w.resolve(n, d)
		}
	}
}

// TestLostRecordRules plays, by hand, the history the fence and the age
// rule exist for, on two nodes under one root: transaction X reads r on
// node 1 and writes m on node 2. Node 1's leaf votes for X, crashes and
// loses X's record, so it no longer holds X's read of r. Y, local to node
// 1, then writes r. Z reads m on node 2, which raises node 2's clock above
// Y's commit, and X's part reaches node 2 only then: were X to commit, its
// timestamp would be above Y's, though it read r before Y's write.
//
//   - With every rule, node 1 takes Y only after the fence (by then Y is
//     too old, and its client's retry commits), and X either commits
//     before (its part reaches node 2 within the fence) or is aborted for
//     its age (after): the history is serializable.
//   - Without the fence, Y commits at once, and X commits after it: the
//     serial oracle reports X's read of r.
//   - Without the age rule, X's part reaching node 2 after the fence
//     commits X after Y: the same.
func TestLostRecordRules(t *testing.T) {
	for _, tc := range []struct {
		name           string
		noFence, noAge bool
		late           bool   // X's part reaches node 2 after the fence
		want           string // in checkHistory's error; "" for none
	}{
		{name: "all rules, X's part within the fence"},
		{name: "all rules, X's part after the fence", late: true},
		{name: "no fence", noFence: true, want: `read "r"`},
		{name: "no age rule, X's part after the fence", noAge: true, late: true, want: `read "r"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newScriptWorld(t)
			w.loss.noFence, w.loss.noAge = tc.noFence, tc.noAge
			x := w.scriptTxn([]string{"r", "m"}, []string{"m"})
			w.runTxn(x)
			toN2 := linkKey{"client", "n2"}
			w.drain(toN2) // X's vote from node 1 reaches the root
			leaf1, _ := w.tree.Leaf(1)
			w.crash(leaf1)
			w.advance(time.Millisecond)
			if err := w.restart(leaf1); err != nil {
				t.Fatal(err)
			}
			if w.loss.lost != 1 {
				t.Fatalf("%d records lost, want X's", w.loss.lost)
			}
			y := w.scriptTxn([]string{"r"}, []string{"r"})
			w.runTxn(y)
			w.drain(toN2) // Y's part at node 1 (held there by the fence)
			// retry is Y's client trying again once the fence has passed
			// (Y itself, held that long, is too old to commit by then).
			retry := func() *simTxn {
				w.advance(w.loss.fence)
				w.drain(toN2)
				y2 := w.scriptTxn([]string{"r"}, []string{"r"})
				w.runTxn(y2)
				w.drain(toN2)
				return y2
			}
			var y2 *simTxn
			if tc.late {
				y2 = retry()
			}
			z := w.scriptTxn([]string{"m"}, nil)
			w.runTxn(z)
			w.drain() // X's part at node 2, and its decision
			if !tc.late {
				y2 = retry()
			}
			w.advance(w.loss.fence)
			w.drain()
			w.sweep()
			if !w.quiescent() {
				t.Fatalf("not quiescent: links %v", w.links)
			}
			if tc.want == "" && !w.status[y2.id].Commit {
				t.Fatalf("Y's retry after the fence: %v, want a commit", w.status[y2.id])
			}
			err := w.checkHistory()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("history: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("history: %v; want an error with %q", err, tc.want)
			}
			t.Logf("X %v, Y %v, Y's retry %v; history: %v; %s", w.status[x.id], w.status[y.id], w.status[y2.id], err, w.loss.summary())
		})
	}
}

// newScriptWorld is a lossy world of two nodes under one root (locking,
// no batching, no resends) with key r on node 1 and m on node 2, for
// histories played by hand. Every record is lost at a restart.
func newScriptWorld(t *testing.T) *simWorld {
	tree, err := ParseTree("(1 2)")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Tree: tree, Variant: Locking, ResendAfter: time.Hour,
		ValidatorBatch: Batching{SizeMax: 1, Timeout: time.Millisecond},
		NodeBatch:      Batching{SizeMax: 1, Timeout: time.Millisecond}}
	w := &simWorld{
		t: t, rng: rand.New(rand.NewSource(1)), tree: tree, cfg: cfg,
		vals: map[ValidatorID]*Validator{}, down: map[ValidatorID]int{}, nodes: map[NodeID]*simNode{},
		status: map[TxnID]Decision{}, links: map[linkKey][]simMsg{}, byID: map[TxnID]*simTxn{},
		keyNode: map[string]NodeID{"r": 1, "m": 2}, keys: []string{"r", "m"},
		loss: newLoss(100, time.Second, time.Hour),
	}
	w.start([]NodeID{1, 2})
	for _, v := range w.vals {
		v.Tick(w.now)
	}
	w.txnsMax = 0
	return w
}

// scriptTxn begins a transaction with these reads and writes, a
// microsecond after the last.
func (w *simWorld) scriptTxn(reads, writes []string) *simTxn {
	w.advance(time.Microsecond)
	w.oracle()
	txn := &simTxn{id: TxnID(w.tso), snapshot: w.tso, readKeys: reads, writes: writes, reads: map[string]uint64{}}
	w.txns = append(w.txns, txn)
	w.byID[txn.id] = txn
	return txn
}

// runTxn does txn's reads and sends its parts.
func (w *simWorld) runTxn(txn *simTxn) {
	for !txn.done {
		w.stepTxn(txn)
	}
}

// advance moves the clock on by d and ticks every live validator.
func (w *simWorld) advance(d time.Duration) {
	w.now += d
	for _, id := range sortedIDs(w.vals) {
		if v := w.vals[id]; v != nil {
			v.Tick(w.now)
			if err := w.process(v); err != nil {
				w.t.Fatal(err)
			}
		}
	}
}

// drain delivers every message it can, but none on the links held.
func (w *simWorld) drain(held ...linkKey) {
	for progress := true; progress; {
		progress = false
		var busy []linkKey
		for k, l := range w.links {
			if len(l) > 0 && !slices.Contains(held, k) {
				busy = append(busy, k)
			}
		}
		slices.SortFunc(busy, func(a, b linkKey) int { return strings.Compare(a.from+" "+a.to, b.from+" "+b.to) })
		for _, k := range busy {
			before := len(w.links[k])
			if err := w.deliver(k); err != nil {
				w.t.Fatal(err)
			}
			progress = progress || len(w.links[k]) < before
		}
	}
}
