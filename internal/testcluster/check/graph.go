package check

import (
	"fmt"
	"sort"
	"strings"
)

// edgeKind is a set of dependency kinds (Adya) between two transactions.
type edgeKind uint8

const (
	// edgeWW: a wrote a version of a key and b wrote a later version of it.
	edgeWW edgeKind = 1 << iota
	// edgeWR: b read a version that a wrote.
	edgeWR
	// edgeRW (anti-dependency): a read a version of a key and b wrote a
	// later version of it, so b must follow a.
	edgeRW

	edgeAll = edgeWW | edgeWR | edgeRW
)

// kindsInPreference lists kinds in the order a cycle report prefers them
// when an edge has several: the more direct dependency first.
var kindsInPreference = [...]edgeKind{edgeWW, edgeWR, edgeRW}

func (k edgeKind) String() string {
	switch k {
	case edgeWW:
		return "ww"
	case edgeWR:
		return "wr"
	case edgeRW:
		return "rw"
	default:
		return fmt.Sprintf("kinds(%d)", uint8(k))
	}
}

// cycleSingleSearchesMax bounds, per strongly connected component, how many
// anti-dependency edges are tried as the single rw edge of a G-single cycle
// (one breadth-first search each). Past it, the component is reported with
// whatever cycle the general search finds, labelled by its actual edges.
const cycleSingleSearchesMax = 256

// edge is the set of dependencies from one transaction to another.
type edge struct {
	kinds edgeKind
	// keys holds, per kind (indexed by bit position), the first key that
	// produced the dependency, for reports.
	keys [3]string
}

// depGraph is the transaction dependency graph: one node per transaction
// that committed (by ID), one edge per ordered pair with any dependency.
//
// Invariant: no edge from a node to itself; a transaction's dependencies on
// its own operations say nothing about serializability.
type depGraph struct {
	out map[int]map[int]*edge
}

func newDepGraph() *depGraph {
	return &depGraph{out: make(map[int]map[int]*edge)}
}

func (g *depGraph) addNode(id int) {
	if g.out[id] == nil {
		g.out[id] = make(map[int]*edge)
	}
}

func (g *depGraph) hasNode(id int) bool {
	_, ok := g.out[id]
	return ok
}

// addEdge records from -kind-> to, produced by key. Self edges are ignored.
// Both ends must be nodes already: an edge to a transaction that is not in
// the graph (aborted, or ambiguous and unobserved) is a checker bug.
func (g *depGraph) addEdge(from, to int, kind edgeKind, key string) {
	if from == to {
		return
	}
	if !g.hasNode(from) || !g.hasNode(to) {
		panic(fmt.Sprintf("check: edge T%d -%s-> T%d has an end outside the graph", from, kind, to))
	}
	e := g.out[from][to]
	if e == nil {
		e = &edge{}
		g.out[from][to] = e
	}
	for i, k := range kindsInPreference {
		if kind == k && e.kinds&k == 0 {
			e.keys[i] = key
		}
	}
	e.kinds |= kind
}

// nodes returns all node IDs in increasing order.
func (g *depGraph) nodes() []int {
	ids := make([]int, 0, len(g.out))
	for id := range g.out {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// successors returns, in increasing order, the nodes reachable from n over
// one edge with a kind in allowed, restricted to within (nil: no
// restriction).
func (g *depGraph) successors(n int, within map[int]bool, allowed edgeKind) []int {
	var succ []int
	for m, e := range g.out[n] {
		if e.kinds&allowed != 0 && (within == nil || within[m]) {
			succ = append(succ, m)
		}
	}
	sort.Ints(succ)
	return succ
}

// sccs returns the strongly connected components with more than one node
// (Tarjan's algorithm) of the subgraph induced by within (nil: the whole
// graph) and the edge kinds in allowed. Each component is sorted, and the
// components are sorted by their smallest node, so that reports are
// deterministic.
func (g *depGraph) sccs(within map[int]bool, allowed edgeKind) [][]int {
	var (
		index   = make(map[int]int) // discovery order; absent = unvisited
		lowlink = make(map[int]int)
		onStack = make(map[int]bool)
		stack   []int
		next    int
		out     [][]int
	)
	var connect func(v int)
	connect = func(v int) {
		index[v] = next
		lowlink[v] = next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, w := range g.successors(v, within, allowed) {
			if _, seen := index[w]; !seen {
				connect(w)
				lowlink[v] = min(lowlink[v], lowlink[w])
			} else if onStack[w] {
				lowlink[v] = min(lowlink[v], index[w])
			}
		}
		if lowlink[v] != index[v] {
			return
		}
		var comp []int
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			onStack[w] = false
			comp = append(comp, w)
			if w == v {
				break
			}
		}
		if len(comp) > 1 {
			sort.Ints(comp)
			out = append(out, comp)
		}
	}
	for _, v := range g.nodes() {
		if within != nil && !within[v] {
			continue
		}
		if _, seen := index[v]; !seen {
			connect(v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// shortestPath returns the nodes of a shortest path from -> ... -> to over
// edges in allowed within within (breadth-first), including both ends, or
// nil if there is none. from == to asks for a shortest cycle through from;
// the result then starts with from and does not repeat it at the end.
func (g *depGraph) shortestPath(from, to int, within map[int]bool, allowed edgeKind) []int {
	parent := map[int]int{from: from}
	queue := []int{from}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range g.successors(v, within, allowed) {
			if w == to {
				path := []int{v}
				for v != from {
					v = parent[v]
					path = append(path, v)
				}
				reverse(path)
				if from != to {
					path = append(path, to)
				}
				return path
			}
			if _, seen := parent[w]; !seen {
				parent[w] = v
				queue = append(queue, w)
			}
		}
	}
	return nil
}

func reverse(s []int) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}

func setOf(ids []int) map[int]bool {
	set := make(map[int]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set
}

// reportCycles adds one anomaly per strongly connected component of the
// graph: a shortest cycle of the most specific class the component holds.
// Like Elle, it looks first for a cycle of ww edges only (G0), then of ww
// and wr edges (G1c), then with exactly one rw edge (G-single), then any
// cycle (G2). A component can hold cycles of several classes; reporting the
// most specific one says the most about the bug, and one line per component
// keeps a badly broken history's report short.
func (g *depGraph) reportCycles(a *report) {
	for _, comp := range g.sccs(nil, edgeAll) {
		class, text := g.describeCycle(rotateToSmallest(g.cycleIn(comp)))
		a.add(class, text)
	}
}

// cycleStep is one edge of a reported cycle: from its node to the next
// step's node (the last step wraps to the first), labelled with one kind.
type cycleStep struct {
	node int
	kind edgeKind
}

// cycleIn returns a cycle inside comp, a strongly connected component, as
// described on reportCycles.
func (g *depGraph) cycleIn(comp []int) []cycleStep {
	within := setOf(comp)
	for _, allowed := range []edgeKind{edgeWW, edgeWW | edgeWR} {
		if sub := g.sccs(within, allowed); len(sub) > 0 {
			return g.label(g.shortestPath(sub[0][0], sub[0][0], setOf(sub[0]), allowed), allowed, false)
		}
	}
	// No cycle avoids rw edges. Try each rw edge a -> b as the single one:
	// a cycle exists if b reaches a over ww and wr edges.
	tries := 0
search:
	for _, a := range comp {
		for _, b := range g.successors(a, within, edgeRW) {
			if tries++; tries > cycleSingleSearchesMax {
				break search
			}
			if path := g.shortestPath(b, a, within, edgeWW|edgeWR); path != nil {
				// path is b ... a; the cycle is a -rw-> b ... a.
				cycle := append([]int{a}, path[:len(path)-1]...)
				return g.label(cycle, edgeWW|edgeWR, true)
			}
		}
	}
	return g.label(g.shortestPath(comp[0], comp[0], within, edgeAll), edgeAll, false)
}

// label picks one kind for each edge of cycle (nodes in order, closing back
// to the first): the first of kindsInPreference that the edge has and
// allowed includes. If firstRW, the first edge is labelled rw.
func (g *depGraph) label(cycle []int, allowed edgeKind, firstRW bool) []cycleStep {
	if len(cycle) < 2 {
		panic(fmt.Sprintf("check: cycle %v has fewer than two transactions", cycle))
	}
	steps := make([]cycleStep, len(cycle))
	for i, from := range cycle {
		to := cycle[(i+1)%len(cycle)]
		e := g.out[from][to]
		if e == nil {
			panic(fmt.Sprintf("check: cycle %v has no edge T%d -> T%d", cycle, from, to))
		}
		steps[i].node = from
		if i == 0 && firstRW {
			steps[i].kind = edgeRW
			continue
		}
		for _, k := range kindsInPreference {
			if e.kinds&allowed&k != 0 {
				steps[i].kind = k
				break
			}
		}
		if steps[i].kind == 0 {
			panic(fmt.Sprintf("check: edge T%d -> T%d has none of the allowed kinds", from, to))
		}
	}
	return steps
}

// rotateToSmallest rotates a cycle to start at its smallest transaction
// ID, so that one cycle always reads the same.
func rotateToSmallest(steps []cycleStep) []cycleStep {
	first := 0
	for i, s := range steps {
		if s.node < steps[first].node {
			first = i
		}
	}
	return append(steps[first:len(steps):len(steps)], steps[:first]...)
}

// describeCycle returns the anomaly class of a labelled cycle and its text,
// e.g. "T3 -rw-> T5 -wr-> T3 (keys "x", "y")".
func (g *depGraph) describeCycle(steps []cycleStep) (class, text string) {
	var b strings.Builder
	keys := make([]string, len(steps))
	var wr, rw int
	for i, s := range steps {
		to := steps[(i+1)%len(steps)].node
		fmt.Fprintf(&b, "T%d -%s-> ", s.node, s.kind)
		for j, k := range kindsInPreference {
			if k == s.kind {
				keys[i] = fmt.Sprintf("%q", g.out[s.node][to].keys[j])
			}
		}
		switch s.kind {
		case edgeWR:
			wr++
		case edgeRW:
			rw++
		}
	}
	fmt.Fprintf(&b, "T%d (keys %s)", steps[0].node, strings.Join(keys, ", "))
	switch {
	case rw == 0 && wr == 0:
		class = "G0"
	case rw == 0:
		class = "G1c"
	case rw == 1:
		class = "G2 (G-single)"
	default:
		class = "G2"
	}
	return class, b.String()
}
