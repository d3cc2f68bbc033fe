package check

import (
	"fmt"
	"slices"
)

// CheckRegister checks that a history of transactions over read/write
// registers is serializable (invariant I3). Each key holds one integer;
// OpWrite sets it to a value that is unique per key and non-zero; OpRead
// returns it, 0 meaning that it was never written. Keys are never deleted.
//
// A read names its writer by value identity, which gives the wr edges. A
// register read, unlike a list read, does not reveal the order of earlier
// writes, so the version order of each key is pieced together from three
// sources, each an assumption written down here:
//
//  1. Commit timestamps. Writers with a non-zero CommitTs are ordered by
//     it. This assumes what Canopy's MVCC does: every committed version is
//     stamped with its transaction's commit_ts, and a read at start_ts sees
//     the newest version at or below it, so commit_ts order is the version
//     order. The timestamps are taken as evidence, not checked; writers
//     without one (typically ambiguous transactions) are left out of this
//     order. Two writers of one key with the same commit_ts are reported as
//     "duplicate commit_ts" and the key gets no timestamp order.
//  2. Writes follow reads. If a committed transaction read a key and later
//     wrote it, its version follows the one it read (Elle's wfr-keys): true
//     of any database that installs writes after the reads of the same
//     transaction, as every MVCC protocol in Canopy does.
//  3. The initial state. A read of 0 saw the key before any write, so every
//     writer of that key follows the reader.
//
// From a ww pair "version of A, then version of B" on a key, every reader of
// A's version gets an rw edge to B. Edges come only from a transaction's
// first read of a key that precedes its own writes to it; later reads are
// checked against the transaction's own reads and writes instead (internal
// inconsistency).
//
// It returns ok == true, and no anomalies, if the history is serializable
// as far as the record shows; the anomaly classes are listed in the package
// documentation. StartTs is not used.
func CheckRegister(txns []TxnRecord) (ok bool, anomalies []string) {
	var a report
	writes := validateTxns(txns, OpWrite, &a)
	if !a.empty() {
		return a.result()
	}
	c := registerChecker{txns: txns, writes: writes, a: &a}
	c.readTrusted()
	c.resolveMembership()
	c.checkIntermediateReads()
	c.inferOrders()
	c.buildGraph()
	c.graph.reportCycles(c.a)
	return a.result()
}

// registerRead is one trusted read of a register.
type registerRead struct {
	txn   int // index into the input
	key   string
	value int
	// external: the transaction's first read of the key, made before it
	// wrote the key.
	external bool
	// op is the index of the read in TxnRecord.Ops.
	op int
}

// wwPair says that writer before's version of a key precedes writer
// after's version (transaction IDs).
type wwPair struct{ before, after int }

// registerChecker holds the state CheckRegister builds step by step; each
// method is one step and documents what it needs from the earlier ones.
type registerChecker struct {
	txns   []TxnRecord
	writes map[string]map[int]writeRef // key -> value -> its write
	a      *report

	reads []registerRead // readTrusted: every read of a committed txn
	// resolveMembership: input indexes of the transactions that committed.
	inGraph map[int]bool
	// inferOrders: key -> the known pairs of the version order.
	pairs map[string][]wwPair
	graph *depGraph // buildGraph
}

// readTrusted collects the reads of committed transactions, reporting
// internal inconsistency on the way.
func (c *registerChecker) readTrusted() {
	for i := range c.txns {
		t := &c.txns[i]
		if statusOf(t) != statusCommitted {
			continue
		}
		type keyState struct {
			known bool // the transaction has read or written the key
			value int  // what it read or wrote last
			wrote bool // the last of those was a write
		}
		states := make(map[string]*keyState)
		for j, op := range t.Ops {
			st := states[op.Key]
			if st == nil {
				st = &keyState{}
				states[op.Key] = st
			}
			if op.Kind == OpWrite {
				*st = keyState{known: true, value: op.Value, wrote: true}
				continue
			}
			if st.known && op.Value != st.value {
				source := "its previous read"
				if st.wrote {
					source = "its own write"
				}
				c.a.add("internal inconsistency", fmt.Sprintf("T%d read %q = %d, want %d (%s)",
					t.ID, op.Key, op.Value, st.value, source))
			}
			c.reads = append(c.reads, registerRead{txn: i, key: op.Key, value: op.Value, external: !st.known, op: j})
			*st = keyState{known: true, value: op.Value}
		}
	}
}

// resolveMembership decides which transactions committed: the
// acknowledged ones, and the ambiguous ones that a trusted read observed.
// On the way it reports reads of values that no committed transaction
// wrote: G1a (the writer aborted) and garbage (nobody wrote it).
func (c *registerChecker) resolveMembership() {
	c.inGraph = make(map[int]bool)
	for i := range c.txns {
		if statusOf(&c.txns[i]) == statusCommitted {
			c.inGraph[i] = true
		}
	}
	for _, r := range c.reads {
		if r.value == 0 {
			continue
		}
		reader := c.txns[r.txn].ID
		w, ok := c.writes[r.key][r.value]
		switch {
		case !ok:
			c.a.add("garbage read", fmt.Sprintf("T%d read %q = %d: nobody wrote it", reader, r.key, r.value))
		case statusOf(&c.txns[w.txn]) == statusAborted:
			c.a.add("G1a", fmt.Sprintf("T%d read %q = %d, written by T%d, which did not commit",
				reader, r.key, r.value, c.txns[w.txn].ID))
		default:
			c.inGraph[w.txn] = true
		}
	}
}

// lastWrite returns the last value transaction i wrote to key.
func (c *registerChecker) lastWrite(i int, key string) (int, bool) {
	ops := c.txns[i].Ops
	for j := len(ops) - 1; j >= 0; j-- {
		if ops[j].Kind == OpWrite && ops[j].Key == key {
			return ops[j].Value, true
		}
	}
	return 0, false
}

// writer returns the input index of the committed transaction that wrote
// value to key, or false if it did not commit or nobody wrote it.
func (c *registerChecker) writer(key string, value int) (int, bool) {
	w, ok := c.writes[key][value]
	if !ok || !c.inGraph[w.txn] {
		return 0, false
	}
	return w.txn, true
}

// checkIntermediateReads reports G1b: an external read of a value that its
// writer overwrote in the same transaction.
func (c *registerChecker) checkIntermediateReads() {
	for _, r := range c.reads {
		if !r.external || r.value == 0 {
			continue
		}
		w, ok := c.writer(r.key, r.value)
		if !ok || w == r.txn {
			continue
		}
		if last, _ := c.lastWrite(w, r.key); last != r.value {
			c.a.add("G1b", fmt.Sprintf("T%d read %q = %d, but T%d overwrote it with %d",
				c.txns[r.txn].ID, r.key, r.value, c.txns[w].ID, last))
		}
	}
}

// writersOf returns the input indexes of the committed transactions that
// wrote key, in input order.
func (c *registerChecker) writersOf(key string) []int {
	var ws []int
	seen := make(map[int]bool)
	for _, value := range sortedInts(c.writes[key]) {
		w, ok := c.writer(key, value)
		if ok && !seen[w] {
			seen[w] = true
			ws = append(ws, w)
		}
	}
	slices.Sort(ws)
	return ws
}

// inferOrders collects the known pairs of each key's version order from
// commit timestamps and from writes that follow reads (sources 1 and 2 on
// CheckRegister; source 3 needs no pairs).
func (c *registerChecker) inferOrders() {
	c.pairs = make(map[string][]wwPair)
	for _, key := range sortedKeys(c.writes) {
		var stamped []int
		for _, w := range c.writersOf(key) {
			if c.txns[w].CommitTs != 0 {
				stamped = append(stamped, w)
			}
		}
		slices.SortStableFunc(stamped, func(x, y int) int {
			return cmpUint64(c.txns[x].CommitTs, c.txns[y].CommitTs)
		})
		var pairs []wwPair
		for j := 1; j < len(stamped); j++ {
			x, y := &c.txns[stamped[j-1]], &c.txns[stamped[j]]
			if x.CommitTs == y.CommitTs {
				c.a.add("duplicate commit_ts", fmt.Sprintf("T%d and T%d both wrote %q at commit_ts %d",
					x.ID, y.ID, key, x.CommitTs))
				pairs = nil
				break
			}
			pairs = append(pairs, wwPair{x.ID, y.ID})
		}
		c.pairs[key] = pairs
	}
	for _, r := range c.reads {
		if !r.external || r.value == 0 || !c.writesAfter(r.txn, r.key, r.op) {
			continue
		}
		if w, ok := c.writer(r.key, r.value); ok && w != r.txn {
			c.pairs[r.key] = append(c.pairs[r.key], wwPair{c.txns[w].ID, c.txns[r.txn].ID})
		}
	}
}

// writesAfter reports whether transaction i writes key after its op-th
// micro-operation.
func (c *registerChecker) writesAfter(i int, key string, op int) bool {
	for _, o := range c.txns[i].Ops[op+1:] {
		if o.Kind == OpWrite && o.Key == key {
			return true
		}
	}
	return false
}

func cmpUint64(x, y uint64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	default:
		return 0
	}
}

// buildGraph adds the ww, wr and rw edges described on CheckRegister.
func (c *registerChecker) buildGraph() {
	g := newDepGraph()
	c.graph = g
	for i := range c.txns {
		if c.inGraph[i] {
			g.addNode(c.txns[i].ID)
		}
	}
	// after[key][id]: the writers whose versions of key are known to follow
	// id's version directly.
	after := make(map[string]map[int][]int)
	for _, key := range sortedKeys(c.pairs) {
		after[key] = make(map[int][]int)
		for _, p := range c.pairs[key] {
			g.addEdge(p.before, p.after, edgeWW, key)
			after[key][p.before] = append(after[key][p.before], p.after)
		}
	}
	writers := make(map[string][]int) // writersOf, computed once per key
	for _, r := range c.reads {
		if !r.external {
			continue
		}
		reader := c.txns[r.txn].ID
		if r.value == 0 {
			// Source 3: every writer of the key follows a read of the
			// initial state.
			if _, ok := writers[r.key]; !ok {
				writers[r.key] = c.writersOf(r.key)
			}
			for _, w := range writers[r.key] {
				g.addEdge(reader, c.txns[w].ID, edgeRW, r.key)
			}
			continue
		}
		w, ok := c.writer(r.key, r.value)
		if !ok {
			continue // reported by resolveMembership
		}
		writerID := c.txns[w].ID
		g.addEdge(writerID, reader, edgeWR, r.key)
		for _, next := range after[r.key][writerID] {
			g.addEdge(reader, next, edgeRW, r.key)
		}
	}
}
