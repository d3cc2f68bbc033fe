package hierarchy

import (
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

var (
	simSeed  = flag.Int64("sim.seed", 0, "run only this seed of TestSimulation")
	simRuns  = flag.Int("sim.runs", 24, "number of seeds TestSimulation runs")
	simTrace = flag.Bool("sim.trace", false, "print every step of TestSimulation")
)

// TestSimulation runs whole trees of validators with their data nodes and
// clients in one goroutine: random local and distributed transactions with
// read and write sets, messages delivered in random order across links
// (FIFO within a link, which is what the transport guarantees), random
// batching, validator crashes and restarts. It checks every decision
// against a serial oracle: the committed transactions in commit-timestamp
// order (read-only ones at their snapshot) form a valid serial history,
// each read seeing the latest committed write before it; no decision ever
// changes; the client, the status table and the nodes' versions agree.
// A failure prints its seed; rerun it with -sim.seed=N -sim.trace.
func TestSimulation(t *testing.T) {
	seeds := make([]int64, 0, *simRuns)
	if *simSeed != 0 {
		seeds = append(seeds, *simSeed)
	} else {
		for i := 1; i <= *simRuns; i++ {
			seeds = append(seeds, int64(i))
		}
	}
	shared, lost, orphans := 0, 0, 0
	for _, seed := range seeds {
		w := newSimWorld(t, seed)
		if err := w.run(); err != nil {
			t.Fatalf("seed %d (%s): %v", seed, w.desc, err)
		}
		if err := w.checkHistory(); err != nil {
			t.Fatalf("seed %d (%s): %v", seed, w.desc, err)
		}
		if *simSeed != 0 || testing.Verbose() {
			t.Logf("seed %d (%s): %d txns, %d committed, %d aborted by validation (%d parts refused as overloaded), %d given up by the client, %d crashes, %d steps; counts %+v",
				seed, w.desc, len(w.txns), w.committed, w.abortedByValidation, w.overloaded, w.givenUp, w.crashes, w.steps, w.totalCounts())
			if w.loss != nil {
				t.Logf("seed %d: %s", seed, w.loss.summary())
			}
		}
		shared += w.sharedRounds
		if w.loss != nil {
			lost += w.loss.lost
			orphans += w.loss.readerAborts + w.loss.swept + w.loss.agedAborts
		}
	}
	if len(seeds) >= 8 && (lost == 0 || orphans == 0) {
		t.Errorf("lost part records: %d lost, %d orphaned parts ended: the rules of sim_records_test.go went untested", lost, orphans)
	}
	if len(seeds) >= 8 && shared == 0 {
		t.Errorf("no seed took parts in a round of more than one: Check and ProposeChecked went untested")
	}
}

type simVersion struct {
	ts  uint64
	txn TxnID
}

type simNode struct {
	id       NodeID
	versions map[string][]simVersion // sorted by ts
	intents  map[string]TxnID
	// parts are the durable part results (with the intents).
	parts map[TxnID]PartResult
	// writes are the keys each transaction wrote here (its intents).
	writes map[TxnID][]string
}

type simTxn struct {
	id       TxnID
	snapshot uint64
	nodes    []NodeID
	readKeys []string
	writes   []string
	// reads: the version each read key returned (0: no version).
	reads     map[string]uint64
	nextRead  int
	waits     int
	committed bool // commit requested
	done      bool
	result    *Decision
}

type linkKey struct {
	from, to string
}

type simWorld struct {
	t       *testing.T
	rng     *rand.Rand
	desc    string
	tree    *Tree
	cfg     Config
	vals    map[ValidatorID]*Validator
	down    map[ValidatorID]int // steps until restart
	nodes   map[NodeID]*simNode
	status  map[TxnID]Decision
	links   map[linkKey][]simMsg
	now     time.Duration
	tso     uint64
	txns    []*simTxn
	byID    map[TxnID]*simTxn
	keys    []string
	keyNode map[string]NodeID

	txnsMax, crashesMax                     int
	localPct, readOnlyPct                   int
	committed, abortedByValidation, givenUp int
	crashes, overloaded, steps              int
	gone                                    Counts // counts of crashed incarnations
	// released: per decider, the commits it has told (timestamp variant,
	// checked in timestamp order while nothing crashed).
	released    map[ValidatorID]map[TxnID]bool
	lastRelease map[ValidatorID]uint64
	// record, if set, gets the trace (TestSimulationDeterministic).
	record *strings.Builder
	// rounds: a node takes the parts queued on its link in rounds, as
	// kvserver's leaf loop does (proposeRound); sharedRounds counts the
	// parts checked in a round of more than one.
	rounds       bool
	sharedRounds int
	// loss, if set, models lost part records and the rules that make them
	// safe (sim_records_test.go).
	loss *simLoss
}

type simMsg struct {
	m    Message
	part *Part
}

func newSimWorld(t *testing.T, seed int64) *simWorld {
	rng := rand.New(rand.NewSource(seed))
	nNodes := 2 + rng.Intn(7)
	ids := make([]NodeID, nNodes)
	for i := range ids {
		ids[i] = NodeID(i + 1)
	}
	var tree *Tree
	var err error
	if nNodes >= 4 && rng.Intn(2) == 0 {
		// Three levels: groups of 2 or 3 leaves under inner validators.
		var b strings.Builder
		b.WriteByte('(')
		for i := 0; i < nNodes; {
			g := min(2+rng.Intn(2), nNodes-i)
			b.WriteByte('(')
			for j := 0; j < g; j++ {
				fmt.Fprintf(&b, "%d ", ids[i+j])
			}
			b.WriteString(") ")
			i += g
		}
		b.WriteByte(')')
		tree, err = ParseTree(b.String())
	} else {
		tree, err = DefaultTree(ids)
	}
	if err != nil {
		t.Fatal(err)
	}
	variant := Locking
	if seed%2 == 0 {
		variant = Timestamps
	}
	sizes := []int{1, 1, 2, 3, 5, 10}
	cfg := Config{
		Tree:           tree,
		Variant:        variant,
		ValidatorBatch: Batching{SizeMax: sizes[rng.Intn(len(sizes))], Timeout: time.Duration(1+rng.Intn(5)) * time.Millisecond},
		NodeBatch:      Batching{SizeMax: sizes[rng.Intn(len(sizes))], Timeout: time.Duration(1+rng.Intn(5)) * time.Millisecond},
		ResendAfter:    time.Duration(20+rng.Intn(40)) * time.Millisecond,
		LatestKeysMax:  []int{8, 1 << 20}[rng.Intn(2)],
		PendingMax:     []int{3, 1 << 20}[rng.Intn(2)],
	}
	w := &simWorld{
		t: t, rng: rng, tree: tree, cfg: cfg,
		vals:        map[ValidatorID]*Validator{},
		down:        map[ValidatorID]int{},
		nodes:       map[NodeID]*simNode{},
		status:      map[TxnID]Decision{},
		links:       map[linkKey][]simMsg{},
		byID:        map[TxnID]*simTxn{},
		keyNode:     map[string]NodeID{},
		txnsMax:     150 + rng.Intn(150),
		crashesMax:  rng.Intn(4),
		localPct:    rng.Intn(80),
		readOnlyPct: rng.Intn(20),
		// From the seed, not the generator, so that the other seeds'
		// worlds stay as they were.
		rounds: seed%4 >= 2,
	}
	if seed%3 == 0 {
		w.loss = newSimLoss(seed)
		w.crashesMax = 3 + w.crashesMax*2
	}
	nKeys := 4*nNodes + rng.Intn(30)
	for i := 0; i < nKeys; i++ {
		k := fmt.Sprintf("k%d", i)
		w.keys = append(w.keys, k)
		w.keyNode[k] = ids[rng.Intn(nNodes)]
	}
	w.desc = fmt.Sprintf("tree %s, %s, batch %d/%v node batch %d/%v, %d keys, %d%% local, %d crashes max, parts in rounds %v",
		tree, variant, cfg.ValidatorBatch.SizeMax, cfg.ValidatorBatch.Timeout, cfg.NodeBatch.SizeMax, cfg.NodeBatch.Timeout, nKeys, w.localPct, w.crashesMax, w.rounds)
	if w.loss != nil {
		w.desc += ", " + w.loss.String()
	}
	w.start(ids)
	return w
}

// start makes the world's data nodes ids and a fresh validator for every
// vertex of its tree.
func (w *simWorld) start(ids []NodeID) {
	for _, n := range ids {
		w.nodes[n] = &simNode{id: n, versions: map[string][]simVersion{}, intents: map[string]TxnID{}, parts: map[TxnID]PartResult{}, writes: map[TxnID][]string{}}
	}
	for id := 0; id < w.tree.Size(); id++ {
		c := w.cfg
		c.ID = ValidatorID(id)
		v, err := New(c, Recovery{})
		if err != nil {
			w.t.Fatal(err)
		}
		w.vals[c.ID] = v
	}
}

func (w *simWorld) tracef(format string, args ...any) {
	if *simTrace {
		w.t.Logf("%8v "+format, append([]any{w.now}, args...)...)
	}
	if w.record != nil {
		fmt.Fprintf(w.record, "%v "+format+"\n", append([]any{w.now}, args...)...)
	}
}

// TestSimulationDeterministic: one seed replays one history, message for
// message, which is what makes a failing seed worth printing.
func TestSimulationDeterministic(t *testing.T) {
	for _, seed := range []int64{3, 4} {
		var traces [2]strings.Builder
		for i := range traces {
			w := newSimWorld(t, seed)
			w.record = &traces[i]
			if err := w.run(); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
		if traces[0].Len() == 0 || traces[0].String() != traces[1].String() {
			t.Fatalf("seed %d: two runs differ (%d and %d bytes of trace)", seed, traces[0].Len(), traces[1].Len())
		}
	}
}

func vname(id ValidatorID) string { return fmt.Sprintf("v%d", id) }
func nname(n NodeID) string       { return fmt.Sprintf("n%d", n) }

func (w *simWorld) send(from, to string, m simMsg) {
	k := linkKey{from, to}
	w.links[k] = append(w.links[k], m)
}

// process carries out a validator's Ready the way doc.go's contract says:
// make parts and decisions durable, then send and resolve.
func (w *simWorld) process(v *Validator) error {
	for v.HasReady() {
		rd := v.Ready()
		leafNode := w.tree.Node(v.ID())
		for _, pr := range rd.Parts {
			n := w.nodes[leafNode]
			n.parts[pr.Part.Txn] = pr
		}
		for _, d := range rd.Decisions {
			if err := w.persist(d); err != nil {
				return err
			}
		}
		w.patch(&rd)
		for _, m := range rd.Messages {
			w.tracef("%s sends %v", vname(v.ID()), m)
			switch m.Kind {
			case MsgVotes, MsgRaise:
				w.send(vname(m.From), vname(m.To), simMsg{m: m})
			case MsgDecisions:
				w.send(vname(m.From), nname(m.Node), simMsg{m: m})
			case MsgResult:
				w.send(vname(m.From), "client", simMsg{m: m})
				if err := w.checkReleaseOrder(m); err != nil {
					return err
				}
			}
		}
		for _, d := range rd.Resolve {
			w.resolve(w.nodes[leafNode], d)
		}
		for _, txn := range rd.Lookups {
			if d, ok := w.lookup(txn); ok {
				w.tracef("%s looks up txn %d: %v", vname(v.ID()), txn, d)
				v.Decided(d)
			}
		}
	}
	return nil
}

// checkReleaseOrder: in the timestamp variant a decider tells its commits
// in timestamp order (commit timestamps are unique there). A crash voids
// the promise for votes sent again (see doc.go), so it is checked only
// while nothing has crashed.
func (w *simWorld) checkReleaseOrder(m Message) error {
	if w.cfg.Variant != Timestamps || w.crashes > 0 || !m.Result.Commit || w.released[m.From][m.Result.Txn] {
		return nil
	}
	if w.released == nil {
		w.released, w.lastRelease = map[ValidatorID]map[TxnID]bool{}, map[ValidatorID]uint64{}
	}
	if w.released[m.From] == nil {
		w.released[m.From] = map[TxnID]bool{}
	}
	w.released[m.From][m.Result.Txn] = true
	if m.Result.TS <= w.lastRelease[m.From] {
		return fmt.Errorf("v%d told %v after a commit at %d", m.From, m.Result, w.lastRelease[m.From])
	}
	w.lastRelease[m.From] = m.Result.TS
	return nil
}

func (w *simWorld) resolve(n *simNode, d Decision) {
	ks := n.writes[d.Txn]
	for _, k := range ks {
		if n.intents[k] != d.Txn {
			w.t.Fatalf("node %d resolves txn %d at %q, whose intent is txn %d's", n.id, d.Txn, k, n.intents[k])
		}
		delete(n.intents, k)
		if d.Commit {
			vs := append(n.versions[k], simVersion{ts: d.TS, txn: d.Txn})
			sort.Slice(vs, func(i, j int) bool { return vs[i].ts < vs[j].ts })
			n.versions[k] = vs
		}
	}
	delete(n.writes, d.Txn)
	delete(n.parts, d.Txn)
}

// propose is the node taking a commit request: it hands the part to its
// leaf, writes the intents of an accepted part (before anything leaves the
// leaf) and carries out the Ready.
func (w *simWorld) propose(n *simNode, p Part) error {
	leaf, _ := w.tree.Leaf(n.id)
	v := w.vals[leaf]
	w.storageCheck(n, &p)
	if err := v.Propose(p); errors.Is(err, ErrOverloaded) {
		w.overloaded++ // the leaf aborted the transaction (Ready has it)
		w.tracef("node %d refuses txn %d: %v", n.id, p.Txn, err)
	} else if err != nil {
		return err
	}
	if err := w.writeIntents(n, v, p); err != nil {
		return err
	}
	return w.process(v)
}

// writeIntents writes the intents of p if its verdict, in the Ready not
// yet taken, accepted it.
func (w *simWorld) writeIntents(n *simNode, v *Validator, p Part) error {
	// The part's verdict is in the Ready (Parts, or a local Decision).
	accepted := false
	for _, pr := range v.rd.Parts {
		if pr.Part.Txn == p.Txn {
			accepted = pr.OK
		}
	}
	for _, d := range v.rd.Decisions {
		if d.Txn == p.Txn {
			accepted = d.Commit
		}
	}
	if accepted {
		for _, k := range p.Writes {
			if other, ok := n.intents[k]; ok {
				return fmt.Errorf("node %d: txn %d accepted at %q, where txn %d has an intent", n.id, p.Txn, k, other)
			}
			n.intents[k] = p.Txn
		}
		n.writes[p.Txn] = p.Writes
	}
	return nil
}

// proposeRound is the node taking first and the parts queued behind it on
// its link whose keys are disjoint from those taken before, as kvserver's
// leaf loop takes a round: every part is checked (Check) before any is
// admitted, then each is admitted in order (ProposeChecked) with its
// intents, and the Ready is carried out once, after the round.
func (w *simWorld) proposeRound(n *simNode, k linkKey, first Part) error {
	leaf, _ := w.tree.Leaf(n.id)
	v := w.vals[leaf]
	parts := []Part{first}
	taken := map[string]bool{}
	disjoint := func(p Part) bool {
		for _, k := range append(slices.Clone(p.Reads), p.Writes...) {
			if taken[k] {
				return false
			}
		}
		return true
	}
	take := func(p Part) {
		for _, k := range append(slices.Clone(p.Reads), p.Writes...) {
			taken[k] = true
		}
	}
	take(first)
	for len(w.links[k]) > 0 {
		sm := w.links[k][0]
		if sm.part == nil || !disjoint(*sm.part) {
			break
		}
		w.links[k] = w.links[k][1:]
		take(*sm.part)
		parts = append(parts, *sm.part)
	}
	if len(parts) > 1 {
		w.sharedRounds += len(parts)
	}
	oks := make([]bool, len(parts))
	for i := range parts {
		w.storageCheck(n, &parts[i])
		oks[i] = v.Check(parts[i])
	}
	for i, p := range parts {
		w.tracef("node %d takes txn %d's part (round of %d, checked %v)", n.id, p.Txn, len(parts), oks[i])
		if err := v.ProposeChecked(p, oks[i]); errors.Is(err, ErrOverloaded) {
			w.overloaded++
		} else if err != nil {
			return err
		}
		if err := w.writeIntents(n, v, p); err != nil {
			return err
		}
	}
	return w.process(v)
}

// oracle is the sim's timestamp oracle: like Canopy's, it runs with the
// clock (here one timestamp per microsecond) and strictly increases.
func (w *simWorld) oracle() uint64 {
	w.tso = max(w.tso+1, uint64(w.now/time.Microsecond))
	return w.tso
}

func (w *simWorld) begin() {
	w.oracle()
	txn := &simTxn{id: TxnID(w.tso), snapshot: w.tso, reads: map[string]uint64{}}
	nodeIDs := make([]NodeID, 0, len(w.nodes))
	for n := range w.nodes {
		nodeIDs = append(nodeIDs, n)
	}
	slices.Sort(nodeIDs)
	var allowed []NodeID
	if w.rng.Intn(100) < w.localPct {
		allowed = []NodeID{nodeIDs[w.rng.Intn(len(nodeIDs))]}
	} else {
		w.rng.Shuffle(len(nodeIDs), func(i, j int) { nodeIDs[i], nodeIDs[j] = nodeIDs[j], nodeIDs[i] })
		allowed = nodeIDs[:2+w.rng.Intn(min(3, len(nodeIDs)-1))]
	}
	var cands []string
	for _, k := range w.keys {
		if slices.Contains(allowed, w.keyNode[k]) {
			cands = append(cands, k)
		}
	}
	if len(cands) == 0 {
		return
	}
	pick := func(n int) []string {
		var out []string
		for i := 0; i < n; i++ {
			k := cands[w.rng.Intn(len(cands))]
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
		return out
	}
	txn.readKeys = pick(1 + w.rng.Intn(3))
	if w.rng.Intn(100) >= w.readOnlyPct {
		txn.writes = pick(1 + w.rng.Intn(3))
		// Often read-modify-write, the thesis's workload.
		if w.rng.Intn(2) == 0 {
			for _, k := range txn.writes {
				if !slices.Contains(txn.readKeys, k) {
					txn.readKeys = append(txn.readKeys, k)
				}
			}
		}
	}
	w.txns = append(w.txns, txn)
	w.byID[txn.id] = txn
	w.tracef("begin txn %d reads %v writes %v", txn.id, txn.readKeys, txn.writes)
}

// stepTxn moves a transaction on: its next read, or its commit request.
func (w *simWorld) stepTxn(txn *simTxn) {
	if txn.nextRead < len(txn.readKeys) {
		k := txn.readKeys[txn.nextRead]
		n := w.nodes[w.keyNode[k]]
		leaf, _ := w.tree.Leaf(n.id)
		if w.vals[leaf] == nil {
			return // node down: try later
		}
		if other, ok := n.intents[k]; ok && other != txn.id {
			if w.readerMeets(n, other) {
				return // read again at the next step
			}
			// 3.2.2: a read of a tentative version waits until it is final
			// or discarded; give up after a while (client-side abort).
			txn.waits++
			if txn.waits > 50 {
				txn.done = true
				w.givenUp++
			}
			return
		}
		// The read pushes the leaf's clock above the snapshot, then reads.
		w.vals[leaf].Observe(txn.snapshot)
		var got uint64
		for _, ver := range n.versions[k] {
			if ver.ts <= txn.snapshot {
				got = ver.ts
			}
		}
		txn.reads[k] = got
		txn.nextRead++
		return
	}
	if len(txn.writes) == 0 {
		txn.done = true // read-only: nothing to validate (3.2.2)
		return
	}
	// Commit: one part per involved node with that node's reads and writes.
	parts := map[NodeID]*Part{}
	for _, k := range txn.readKeys {
		n := w.keyNode[k]
		if parts[n] == nil {
			parts[n] = &Part{}
		}
		parts[n].Reads = append(parts[n].Reads, k)
	}
	for _, k := range txn.writes {
		n := w.keyNode[k]
		if parts[n] == nil {
			parts[n] = &Part{}
		}
		parts[n].Writes = append(parts[n].Writes, k)
	}
	for n := range parts {
		txn.nodes = append(txn.nodes, n)
	}
	slices.Sort(txn.nodes)
	for _, n := range txn.nodes {
		p := parts[n]
		p.Txn, p.Client, p.Snapshot, p.Nodes = txn.id, 1, txn.snapshot, txn.nodes
		w.send("client", nname(n), simMsg{part: p})
	}
	txn.committed = true
	txn.done = true
}

func (w *simWorld) deliver(k linkKey) error {
	sm := w.links[k][0]
	switch {
	case sm.part != nil:
		n := w.nodes[sm.part.Nodes[0]]
		for _, id := range sm.part.Nodes {
			if nname(id) == k.to {
				n = w.nodes[id]
			}
		}
		leaf, _ := w.tree.Leaf(n.id)
		if w.vals[leaf] == nil {
			return nil // node down: the client's request waits (it retries)
		}
		if w.fenced(n, w.vals[leaf]) {
			return nil // the restarted leaf's fence: the request waits
		}
		w.links[k] = w.links[k][1:]
		if w.rounds {
			return w.proposeRound(n, k, *sm.part)
		}
		w.tracef("node %d takes txn %d's part", n.id, sm.part.Txn)
		return w.propose(n, *sm.part)
	case sm.m.Kind == MsgResult:
		w.links[k] = w.links[k][1:]
		txn := w.byID[sm.m.Result.Txn]
		if txn.result != nil && *txn.result != sm.m.Result {
			return fmt.Errorf("client told %v, then %v", *txn.result, sm.m.Result)
		}
		r := sm.m.Result
		txn.result = &r
		return nil
	case sm.m.Kind == MsgDecisions:
		w.links[k] = w.links[k][1:]
		leaf, _ := w.tree.Leaf(sm.m.Node)
		v := w.vals[leaf]
		if v == nil {
			return nil // lost with the crashed node
		}
		w.tracef("node %d takes %v", sm.m.Node, sm.m)
		if err := v.Step(sm.m); err != nil {
			return err
		}
		return w.process(v)
	default:
		w.links[k] = w.links[k][1:]
		v := w.vals[sm.m.To]
		if v == nil {
			return nil // lost with the crashed validator
		}
		w.tracef("%s takes %v", vname(sm.m.To), sm.m)
		if err := v.Step(sm.m); err != nil {
			return err
		}
		return w.process(v)
	}
}

func (w *simWorld) crash(id ValidatorID) {
	w.crashes++
	w.gone = w.gone.Add(w.vals[id].Counts())
	w.vals[id] = nil
	w.down[id] = 20 + w.rng.Intn(200)
	w.tracef("crash %s", vname(id))
	// Messages to it, and those it had not sent yet, are lost.
	for k := range w.links {
		if k.to == vname(id) || k.from == vname(id) || w.tree.IsLeaf(id) && k.to == nname(w.tree.Node(id)) && k.from != "client" {
			delete(w.links, k)
		}
	}
}

func (w *simWorld) restart(id ValidatorID) error {
	c := w.cfg
	c.ID = id
	var rec Recovery
	if w.tree.IsLeaf(id) {
		n := w.nodes[w.tree.Node(id)]
		if w.loss != nil {
			w.loseRecords(n)
		}
		// Parts decided meanwhile are resolved from the status table; the
		// floors come from a fresh oracle timestamp and the node's state.
		rec.ClockFloor = w.oracle()
		txns := make([]TxnID, 0, len(n.parts))
		for txn := range n.parts {
			txns = append(txns, txn)
		}
		slices.Sort(txns)
		for _, txn := range txns {
			pr := n.parts[txn]
			rec.ClockFloor = max(rec.ClockFloor, pr.TS)
			if d, ok := w.status[txn]; ok {
				w.resolve(n, d)
				rec.ClockFloor = max(rec.ClockFloor, d.TS)
				continue
			}
			rec.Pending = append(rec.Pending, pr)
		}
		for _, vs := range n.versions {
			for _, ver := range vs {
				rec.LatestFloor = max(rec.LatestFloor, ver.ts)
			}
		}
		rec.ClockFloor = max(rec.ClockFloor, rec.LatestFloor)
	}
	v, err := New(c, rec)
	if err != nil {
		return err
	}
	v.Tick(w.now)
	w.vals[id] = v
	delete(w.down, id)
	w.tracef("restart %s with %d pending", vname(id), len(rec.Pending))
	return w.process(v)
}

func (w *simWorld) quiescent() bool {
	if len(w.txns) < w.txnsMax || len(w.down) > 0 {
		return false
	}
	for _, l := range w.links {
		if len(l) > 0 {
			return false
		}
	}
	for _, txn := range w.txns {
		if !txn.done {
			return false
		}
		if txn.committed && w.loss == nil {
			// (With lost records, a transaction whose every part lost its
			// record has no decision: its intents are swept.)
			if _, ok := w.status[txn.id]; !ok {
				return false
			}
		}
	}
	for _, v := range w.vals {
		if v.PendingCount() > 0 {
			if v.isLeaf() || len(v.held) > 0 {
				return false
			}
		}
	}
	return true
}

func (w *simWorld) run() error {
	const stepsMax = 400_000
	for step := 0; step < stepsMax; step++ {
		if w.quiescent() {
			w.steps = step
			w.sweep()
			return nil
		}
		// Restarts count down.
		for _, id := range sortedIDs(w.down) {
			w.down[id]--
			if w.down[id] <= 0 {
				if err := w.restart(id); err != nil {
					return err
				}
			}
		}
		var open []*simTxn
		for _, txn := range w.txns {
			if !txn.done {
				open = append(open, txn)
			}
		}
		var busy []linkKey
		for k, l := range w.links {
			if len(l) > 0 {
				busy = append(busy, k)
			}
		}
		sort.Slice(busy, func(i, j int) bool {
			return busy[i].from < busy[j].from || busy[i].from == busy[j].from && busy[i].to < busy[j].to
		})
		r := w.rng.Intn(100)
		switch {
		case r < 8 && len(w.txns) < w.txnsMax:
			w.begin()
		case r < 35 && len(open) > 0:
			w.stepTxn(open[w.rng.Intn(len(open))])
		case r < 85 && len(busy) > 0:
			if err := w.deliver(busy[w.rng.Intn(len(busy))]); err != nil {
				return err
			}
		case r < 86 && w.crashes < w.crashesMax && len(w.txns) < w.txnsMax:
			id := ValidatorID(w.rng.Intn(w.tree.Size()))
			ok := true
			if w.loss != nil {
				id, ok = w.leafToLose(id)
			}
			if ok && w.vals[id] != nil {
				w.crash(id)
			}
		default:
			w.now += time.Duration(w.rng.Intn(1500)) * time.Microsecond
			for _, id := range sortedIDs(w.vals) {
				if v := w.vals[id]; v != nil {
					v.Tick(w.now)
					if err := w.process(v); err != nil {
						return err
					}
				}
			}
		}
	}
	return fmt.Errorf("not quiescent after %d steps (a transaction never decided?)", stepsMax)
}

func sortedIDs[T any](m map[ValidatorID]T) []ValidatorID {
	ids := make([]ValidatorID, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (w *simWorld) totalCounts() Counts {
	c := w.gone
	for _, v := range w.vals {
		if v != nil {
			c = c.Add(v.Counts())
		}
	}
	return c
}

// checkHistory is the serial oracle.
func (w *simWorld) checkHistory() error {
	type committedTxn struct {
		txn *simTxn
		ts  uint64
	}
	var hist []committedTxn
	writesAt := map[string][]simVersion{} // committed writes per key, sorted
	for _, txn := range w.txns {
		if !txn.committed {
			continue
		}
		d := w.status[txn.id]
		if txn.result != nil && *txn.result != d {
			return fmt.Errorf("txn %d: client told %v, status table has %v", txn.id, *txn.result, d)
		}
		if !d.Commit {
			w.abortedByValidation++
			continue
		}
		w.committed++
		if d.TS <= txn.snapshot {
			return fmt.Errorf("txn %d committed at %d, not above its snapshot %d", txn.id, d.TS, txn.snapshot)
		}
		hist = append(hist, committedTxn{txn, d.TS})
		for _, k := range txn.writes {
			writesAt[k] = append(writesAt[k], simVersion{d.TS, txn.id})
		}
	}
	for k, vs := range writesAt {
		sort.Slice(vs, func(i, j int) bool { return vs[i].ts < vs[j].ts })
		for i := 1; i < len(vs); i++ {
			if vs[i].ts == vs[i-1].ts {
				return fmt.Errorf("txns %d and %d both wrote %q at %d", vs[i-1].txn, vs[i].txn, k, vs[i].ts)
			}
		}
		// The node holds exactly the committed versions.
		got := w.nodes[w.keyNode[k]].versions[k]
		if !slices.Equal(got, vs) {
			return fmt.Errorf("key %q: node holds %v, committed writes are %v", k, got, vs)
		}
	}
	for _, n := range w.nodes {
		if len(n.intents) > 0 {
			return fmt.Errorf("node %d keeps intents %v", n.id, n.intents)
		}
	}
	// latestBefore is the last committed write of k at or below ts, other
	// than by self.
	latestBefore := func(k string, ts uint64, inclusive bool, self TxnID) (uint64, error) {
		var v uint64
		for _, ver := range writesAt[k] {
			if ver.txn == self {
				continue
			}
			if ver.ts < ts || inclusive && ver.ts == ts {
				v = ver.ts
			} else if ver.ts == ts {
				return 0, fmt.Errorf("txn %d wrote %q at %d, the commit timestamp of txn %d, which read it", ver.txn, k, ts, self)
			}
		}
		return v, nil
	}
	for _, c := range hist {
		for k, read := range c.txn.reads {
			want, err := latestBefore(k, c.ts, false, c.txn.id)
			if err != nil {
				return err
			}
			if read != want {
				return fmt.Errorf("txn %d (snapshot %d, commit %d) read %q at version %d; serially the latest write before it is at %d",
					c.txn.id, c.txn.snapshot, c.ts, k, read, want)
			}
		}
	}
	for _, txn := range w.txns {
		if len(txn.writes) > 0 || !txn.done || txn.nextRead < len(txn.readKeys) {
			continue
		}
		for k, read := range txn.reads {
			want, _ := latestBefore(k, txn.snapshot, true, txn.id)
			if read != want {
				return fmt.Errorf("read-only txn %d (snapshot %d) read %q at version %d; serially the latest write at its snapshot is at %d",
					txn.id, txn.snapshot, k, read, want)
			}
		}
	}
	return nil
}
