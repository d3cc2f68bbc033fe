package check

import (
	"fmt"
	"slices"
	"strings"
)

// CheckListAppend checks that a history of transactions over append-only
// lists is serializable (invariant I3), in the manner of Jepsen's Elle
// list-append checker. Each key holds a list; OpAppend adds a value (unique
// per key) at its end; OpRead returns the whole list.
//
// Lists make the database's version order visible: every read of a key must
// be a prefix of every longer read, so the longest read is the order in
// which the elements were appended. From it the checker builds Adya's
// dependency graph over the transactions that committed (acknowledged ones,
// and ambiguous ones whose appends some trusted read observed):
//
//   - ww: the appender of element i -> the appender of element i+1;
//   - wr: the appender of the last element a read saw -> the reader;
//   - rw: a reader that saw the first n elements -> the appender of element
//     n+1 (it must have run before that append).
//
// Appends that committed but that no read observed come after every
// observed element (lists only grow), so they get a ww edge from the last
// observed appender and an rw edge from each reader that saw the whole
// observed list. Edges come only from a transaction's first read of a key,
// with its own earlier appends to that key removed; later reads of the key
// in the same transaction are checked against the first read plus its own
// appends instead (internal inconsistency).
//
// A key whose reads are not prefixes of one another has no version order:
// it is reported as "incompatible order" and contributes only wr edges.
//
// It returns ok == true, and no anomalies, if the history is serializable
// as far as the record shows; the anomaly classes are listed in the package
// documentation. CommitTs and StartTs are not used.
func CheckListAppend(txns []TxnRecord) (ok bool, anomalies []string) {
	var a report
	appends := validateTxns(txns, OpAppend, &a)
	if !a.empty() {
		return a.result()
	}
	c := listChecker{txns: txns, appends: appends, a: &a}
	c.readTrusted()
	c.inferOrders()
	c.resolveMembership()
	c.checkIntermediateReads()
	c.buildGraph()
	c.graph.reportCycles(c.a)
	return a.result()
}

// listRead is one trusted read of a list.
type listRead struct {
	txn  int // index into the input
	key  string
	list []int
	// external: the transaction's first read of the key, internally
	// consistent. Its first prefixLen elements are what the database showed
	// it; the rest are the transaction's own earlier appends.
	external  bool
	prefixLen int
}

// listChecker holds the state CheckListAppend builds step by step; each
// method is one step and documents what it needs from the earlier ones.
type listChecker struct {
	txns    []TxnRecord
	appends map[string]map[int]writeRef // key -> element -> its append
	a       *report

	reads []listRead // readTrusted: every trusted read without duplicates
	// inferOrders: key -> the version order (the longest read), for keys
	// whose reads are all prefixes of it.
	orders map[string][]int
	// inferOrders: keys read by someone whose reads are incompatible.
	unordered map[string]bool
	// resolveMembership: input indexes of the transactions that committed.
	inGraph map[int]bool
	graph   *depGraph // buildGraph
}

// readTrusted collects the reads of committed transactions, reporting
// duplicate elements and internal inconsistency on the way.
func (c *listChecker) readTrusted() {
	for i := range c.txns {
		t := &c.txns[i]
		if statusOf(t) != statusCommitted {
			continue
		}
		type keyState struct {
			read bool  // the transaction has read the key
			last []int // its last read of the key
			own  []int // its appends to the key since that read
		}
		states := make(map[string]*keyState)
		for _, op := range t.Ops {
			st := states[op.Key]
			if st == nil {
				st = &keyState{}
				states[op.Key] = st
			}
			if op.Kind == OpAppend {
				st.own = append(st.own, op.Value)
				continue
			}
			if dup, ok := firstDuplicate(op.List); ok {
				c.a.add("duplicate elements", fmt.Sprintf("T%d read %q = %s: %d appears twice", t.ID, op.Key, fmtList(op.List), dup))
				continue
			}
			r := listRead{txn: i, key: op.Key, list: op.List}
			if st.read {
				want := slices.Concat(st.last, st.own)
				if !slices.Equal(op.List, want) {
					c.a.add("internal inconsistency", fmt.Sprintf("T%d read %q = %s, want %s (its previous read plus its own appends)",
						t.ID, op.Key, fmtList(op.List), fmtList(want)))
				}
			} else if n := len(op.List) - len(st.own); n < 0 || !slices.Equal(op.List[n:], st.own) {
				c.a.add("internal inconsistency", fmt.Sprintf("T%d read %q = %s, want a list ending with its own appends %s",
					t.ID, op.Key, fmtList(op.List), fmtList(st.own)))
			} else {
				r.external, r.prefixLen = true, n
			}
			c.reads = append(c.reads, r)
			st.read, st.last, st.own = true, op.List, nil
		}
	}
}

func firstDuplicate(list []int) (int, bool) {
	seen := make(map[int]bool, len(list))
	for _, v := range list {
		if seen[v] {
			return v, true
		}
		seen[v] = true
	}
	return 0, false
}

// inferOrders takes each key's longest read as its version order and
// checks that every other read of the key is a prefix of it.
func (c *listChecker) inferOrders() {
	longest := make(map[string]listRead)
	for _, r := range c.reads {
		if l, ok := longest[r.key]; !ok || len(r.list) > len(l.list) {
			longest[r.key] = r
		}
	}
	c.orders = make(map[string][]int)
	c.unordered = make(map[string]bool)
	for _, r := range c.reads {
		l := longest[r.key]
		if c.unordered[r.key] || isPrefix(r.list, l.list) {
			continue
		}
		c.unordered[r.key] = true
		c.a.add("incompatible order", fmt.Sprintf("%q: T%d read %s, T%d read %s",
			r.key, c.txns[r.txn].ID, fmtList(r.list), c.txns[l.txn].ID, fmtList(l.list)))
	}
	for key, l := range longest {
		if !c.unordered[key] {
			c.orders[key] = l.list
		}
	}
}

// listHeadShown and listTailShown bound how much of a list a report line
// prints: the head, then a count of the elements left out, then the tail,
// where lists usually differ.
const (
	listHeadShown = 3
	listTailShown = 6
)

// fmtList formats a list for a report line, eliding the middle of a long
// one.
func fmtList(list []int) string {
	if len(list) <= listHeadShown+listTailShown+1 {
		return fmt.Sprint(list)
	}
	head := strings.Trim(fmt.Sprint(list[:listHeadShown]), "[]")
	tail := strings.Trim(fmt.Sprint(list[len(list)-listTailShown:]), "[]")
	return fmt.Sprintf("[%s ...%d more... %s]", head, len(list)-listHeadShown-listTailShown, tail)
}

func isPrefix(prefix, list []int) bool {
	return len(prefix) <= len(list) && slices.Equal(prefix, list[:len(prefix)])
}

// resolveMembership decides which transactions committed: the
// acknowledged ones, and the ambiguous ones that a trusted read observed.
// On the way it reports reads of elements that no committed transaction
// appended: G1a (the appender aborted) and garbage (nobody appended it).
func (c *listChecker) resolveMembership() {
	c.inGraph = make(map[int]bool)
	for i := range c.txns {
		if statusOf(&c.txns[i]) == statusCommitted {
			c.inGraph[i] = true
		}
	}
	for _, r := range c.reads {
		reader := c.txns[r.txn].ID
		reportedGarbage, reportedAborted := false, false
		for _, e := range r.list {
			w, ok := c.appends[r.key][e]
			switch {
			case !ok:
				if !reportedGarbage {
					c.a.add("garbage read", fmt.Sprintf("T%d read %q = %s: nobody appended %d", reader, r.key, fmtList(r.list), e))
					reportedGarbage = true
				}
			case statusOf(&c.txns[w.txn]) == statusAborted:
				if !reportedAborted {
					c.a.add("G1a", fmt.Sprintf("T%d read %q = %s: %d was appended by T%d, which did not commit",
						reader, r.key, fmtList(r.list), e, c.txns[w.txn].ID))
					reportedAborted = true
				}
			default:
				c.inGraph[w.txn] = true
			}
		}
	}
}

// lastAppend returns the last element transaction i appended to key.
func (c *listChecker) lastAppend(i int, key string) (int, bool) {
	ops := c.txns[i].Ops
	for j := len(ops) - 1; j >= 0; j-- {
		if ops[j].Kind == OpAppend && ops[j].Key == key {
			return ops[j].Value, true
		}
	}
	return 0, false
}

// checkIntermediateReads reports G1b: an external read whose last element
// is not the last element its appender appended to the key, so the reader
// saw the appender's state halfway through.
func (c *listChecker) checkIntermediateReads() {
	for _, r := range c.reads {
		if !r.external || r.prefixLen == 0 {
			continue
		}
		e := r.list[r.prefixLen-1]
		w, ok := c.appends[r.key][e]
		if !ok || w.txn == r.txn || !c.inGraph[w.txn] {
			continue
		}
		if last, _ := c.lastAppend(w.txn, r.key); last != e {
			c.a.add("G1b", fmt.Sprintf("T%d read %q = %s, ending in %d, but T%d appended %d after it",
				c.txns[r.txn].ID, r.key, fmtList(r.list), e, c.txns[w.txn].ID, last))
		}
	}
}

// buildGraph adds the ww, wr and rw edges described on CheckListAppend.
func (c *listChecker) buildGraph() {
	g := newDepGraph()
	c.graph = g
	for i := range c.txns {
		if c.inGraph[i] {
			g.addNode(c.txns[i].ID)
		}
	}
	// appender returns the ID of the committed transaction that appended e
	// to key, or false if it did not commit or nobody appended e.
	appender := func(key string, e int) (int, bool) {
		w, ok := c.appends[key][e]
		if !ok || !c.inGraph[w.txn] {
			return 0, false
		}
		return c.txns[w.txn].ID, true
	}

	// wr edges need no version order.
	for _, r := range c.reads {
		if !r.external || r.prefixLen == 0 {
			continue
		}
		if w, ok := appender(r.key, r.list[r.prefixLen-1]); ok {
			g.addEdge(w, c.txns[r.txn].ID, edgeWR, r.key)
		}
	}

	externalByKey := make(map[string][]listRead)
	for _, r := range c.reads {
		if r.external {
			externalByKey[r.key] = append(externalByKey[r.key], r)
		}
	}
	for _, key := range sortedKeys(c.orders) {
		order := c.orders[key]
		inOrder := make(map[int]bool, len(order))
		for _, e := range order {
			inOrder[e] = true
		}
		// Committed appends nobody observed, in a fixed order for reports.
		var unobserved []int
		for _, e := range sortedInts(c.appends[key]) {
			if w, ok := appender(key, e); ok && !inOrder[e] {
				unobserved = append(unobserved, w)
			}
		}

		// ww along the observed order, skipping elements of transactions
		// that did not commit (already reported), then to the unobserved.
		last, haveLast := 0, false
		for _, e := range order {
			w, ok := appender(key, e)
			if !ok {
				continue
			}
			if haveLast {
				g.addEdge(last, w, edgeWW, key)
			}
			last, haveLast = w, true
		}
		if haveLast {
			for _, u := range unobserved {
				g.addEdge(last, u, edgeWW, key)
			}
		}

		// rw from each external read to the next committed append.
		for _, r := range externalByKey[key] {
			reader := c.txns[r.txn].ID
			next, found := 0, false
			for j := r.prefixLen; j < len(order) && !found; j++ {
				next, found = appender(key, order[j])
				found = found && next != reader
			}
			if found {
				g.addEdge(reader, next, edgeRW, key)
				continue
			}
			// Nothing observed follows what the reader saw, except
			// perhaps its own appends: every unobserved append follows.
			for _, u := range unobserved {
				g.addEdge(reader, u, edgeRW, key)
			}
		}
	}
}

func sortedInts[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
