package check

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// randomGraph returns a graph of n nodes with about density*n*n random
// edges of random kinds.
func randomGraph(rng *rand.Rand, n int, density float64) *depGraph {
	g := newDepGraph()
	for i := range n {
		g.addNode(i)
	}
	for from := range n {
		for to := range n {
			if from == to || rng.Float64() >= density {
				continue
			}
			// One or two kinds, so that labelling has to choose.
			for range 1 + rng.IntN(2) {
				g.addEdge(from, to, kindsInPreference[rng.IntN(len(kindsInPreference))], "k")
			}
		}
	}
	return g
}

// plainSCCs is the plain twin of depGraph.sccs: two nodes share a
// component iff each reaches the other, by transitive closure.
func plainSCCs(g *depGraph, allowed edgeKind) [][]int {
	nodes := g.nodes()
	n := len(nodes)
	reach := make([][]bool, n)
	for i, from := range nodes {
		reach[i] = make([]bool, n)
		for j, to := range nodes {
			if e := g.out[from][to]; e != nil && e.kinds&allowed != 0 {
				reach[i][j] = true
			}
		}
	}
	for k := range n {
		for i := range n {
			for j := range n {
				reach[i][j] = reach[i][j] || reach[i][k] && reach[k][j]
			}
		}
	}
	var out [][]int
	assigned := make([]bool, n)
	for i := range n {
		if assigned[i] {
			continue
		}
		comp := []int{nodes[i]}
		for j := i + 1; j < n; j++ {
			if reach[i][j] && reach[j][i] {
				comp = append(comp, nodes[j])
				assigned[j] = true
			}
		}
		if len(comp) > 1 {
			out = append(out, comp)
		}
	}
	return out
}

func TestSCCsMatchPlainTwin(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for range 300 {
		g := randomGraph(rng, 1+rng.IntN(12), rng.Float64()*0.3)
		for _, allowed := range []edgeKind{edgeWW, edgeWW | edgeWR, edgeAll} {
			got, want := g.sccs(nil, allowed), plainSCCs(g, allowed)
			if !slices.EqualFunc(got, want, slices.Equal) {
				t.Fatalf("seed %d: sccs(%v) = %v, plain twin %v", seed, allowed, got, want)
			}
		}
	}
}

// TestReportedCyclesAreCycles checks, on random graphs, that every reported
// cycle follows real edges of the labelled kinds and that its class matches
// its labels and is the most specific one the component holds.
func TestReportedCyclesAreCycles(t *testing.T) {
	seed := uint64(rand.Int64())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for range 300 {
		g := randomGraph(rng, 2+rng.IntN(10), rng.Float64()*0.3)
		for _, comp := range g.sccs(nil, edgeAll) {
			steps := rotateToSmallest(g.cycleIn(comp))
			if steps[0].node != slices.Min(nodesOf(steps)) {
				t.Fatalf("seed %d: cycle %v not rotated to its smallest node", seed, steps)
			}
			seen := make(map[int]bool)
			for i, s := range steps {
				if seen[s.node] {
					t.Fatalf("seed %d: cycle %v repeats T%d", seed, steps, s.node)
				}
				seen[s.node] = true
				to := steps[(i+1)%len(steps)].node
				if e := g.out[s.node][to]; e == nil || e.kinds&s.kind == 0 {
					t.Fatalf("seed %d: cycle %v: no %v edge T%d -> T%d", seed, steps, s.kind, s.node, to)
				}
			}
			class, _ := g.describeCycle(steps)
			within := setOf(comp)
			hasG0 := len(g.sccs(within, edgeWW)) > 0
			hasG1c := len(g.sccs(within, edgeWW|edgeWR)) > 0
			switch {
			case hasG0 && class != "G0":
				t.Fatalf("seed %d: component %v has a ww cycle, reported %s %v", seed, comp, class, steps)
			case !hasG0 && hasG1c && class != "G1c":
				t.Fatalf("seed %d: component %v has a ww/wr cycle, reported %s %v", seed, comp, class, steps)
			case !hasG1c && hasSingle(g, within) != (class == "G2 (G-single)"):
				t.Fatalf("seed %d: component %v: G-single exists = %v, reported %s %v",
					seed, comp, hasSingle(g, within), class, steps)
			}
		}
	}
}

// hasSingle reports whether some rw edge a -> b inside within closes a
// cycle over ww and wr edges, by brute force.
func hasSingle(g *depGraph, within map[int]bool) bool {
	for a := range within {
		for b, e := range g.out[a] {
			if within[b] && e.kinds&edgeRW != 0 && reaches(g, b, a, within, edgeWW|edgeWR) {
				return true
			}
		}
	}
	return false
}

func reaches(g *depGraph, from, to int, within map[int]bool, allowed edgeKind) bool {
	seen := map[int]bool{from: true}
	stack := []int{from}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if v == to {
			return true
		}
		for w, e := range g.out[v] {
			if within[w] && e.kinds&allowed != 0 && !seen[w] {
				seen[w] = true
				stack = append(stack, w)
			}
		}
	}
	return false
}

func nodesOf(steps []cycleStep) []int {
	var ns []int
	for _, s := range steps {
		ns = append(ns, s.node)
	}
	return ns
}

func TestAddEdgePanicsOutsideGraph(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	g := newDepGraph()
	g.addNode(1)
	g.addEdge(1, 2, edgeWW, "x")
}
