package concurrency

import (
	"slices"
	"sync"
)

// Detector is a waits-for graph over transactions, shared by the lock
// tables of one node so that a deadlock spanning several ranges is found
// as readily as one within a range.
//
// Nodes are transactions; an edge a -> b means a queued waiter of a waits
// for b (see LockTable.blockersLocked for which edges a waiter has). Edges
// are counted: two waiters of a waiting for b make one edge of count 2.
// Non-transactional requests are not nodes: they hold nothing, so no one
// can wait for them and they can be on no cycle.
//
// Invariant: the graph is acyclic outside update. Every update that adds
// an edge a -> b searches for a path b ->* a (depth first, in TxnID order,
// so the same history always finds the same cycle); if there is one, the
// youngest transaction on the cycle (the largest TxnID) is the victim.
// All the victim's queued waiters are doomed: their edges leave the graph
// at once, and their tables complete them with ErrDeadlock. Choosing the
// youngest wastes the least work in a store whose IDs are start
// timestamps, and is deterministic.
//
// Cost: one search per new edge, O(nodes + edges) at worst; both are
// bounded by the waiters queued in the tables that share the detector
// (Config.WaitersMax each) and the transactions they wait for.
//
// Rejected alternative: periodic detection from a background goroutine
// with a timer (a "deadlock detection delay", as in many databases). It
// needs a clock and a goroutine in this package and delays every deadlock
// by the period; detection at each new edge finds it at once and costs
// nothing while no one waits.
//
// Lock order: a LockTable's mutex is held when it calls update; Detector.mu
// is a leaf and never calls back into a table.
type Detector struct {
	mu struct {
		sync.Mutex
		// nodes holds every transaction with an out-edge or a registered
		// waiter. Invariant: no node has neither.
		nodes map[TxnID]*detNode
		// epoch marks the nodes visited by the current search.
		epoch uint64
	}
}

type detNode struct {
	// out is sorted by to; every count is > 0.
	out []detEdge
	// waiters are the queued waiters of this transaction, in any table,
	// in registration order.
	waiters []*Waiter
	visit   uint64
}

type detEdge struct {
	to    TxnID
	count int
}

// NewDetector returns an empty waits-for graph, to share among LockTables
// through Config.Detector.
func NewDetector() *Detector {
	d := &Detector{}
	d.mu.nodes = make(map[TxnID]*detNode)
	return d
}

// WaitsFor returns the whole graph: waiting txn -> the txns it waits for,
// sorted.
func (d *Detector) WaitsFor() map[TxnID][]TxnID {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[TxnID][]TxnID{}
	for txn, n := range d.mu.nodes {
		for _, e := range n.out {
			out[txn] = append(out[txn], e.to)
		}
	}
	return out
}

func (d *Detector) nodeLocked(txn TxnID) *detNode {
	n := d.mu.nodes[txn]
	if n == nil {
		n = &detNode{}
		d.mu.nodes[txn] = n
	}
	return n
}

func (d *Detector) forgetEmptyLocked(txn TxnID, n *detNode) {
	if len(n.out) == 0 && len(n.waiters) == 0 {
		delete(d.mu.nodes, txn)
	}
}

// addEdgeLocked counts an edge and reports whether it is new to the graph.
func (d *Detector) addEdgeLocked(n *detNode, to TxnID) bool {
	i, found := slices.BinarySearchFunc(n.out, to, func(e detEdge, x TxnID) int { return compareUint64(uint64(e.to), uint64(x)) })
	if found {
		n.out[i].count++
		return false
	}
	n.out = slices.Insert(n.out, i, detEdge{to: to, count: 1})
	return true
}

func (d *Detector) removeEdgeLocked(n *detNode, to TxnID) {
	i, found := slices.BinarySearchFunc(n.out, to, func(e detEdge, x TxnID) int { return compareUint64(uint64(e.to), uint64(x)) })
	if !found {
		panic("concurrency: waits-for edge missing from the detector")
	}
	n.out[i].count--
	if n.out[i].count == 0 {
		n.out = slices.Delete(n.out, i, i+1)
	}
}

// update brings the graph up to date with the blockers of each waiter in
// ws (a queued waiter has its blockers as edges; any other has none) and
// returns the waiters doomed by the deadlocks it found, in the order
// found. The caller holds the mutex of the waiters' table.
func (d *Detector) update(ws []*Waiter) (doomed []*Waiter) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var added []TxnID
	for _, w := range ws {
		if w.det.doomed || w.txn == 0 {
			continue
		}
		queued := w.state == waiterQueued
		var want []TxnID
		if queued {
			want = w.blockers
		}
		if !queued && !w.det.registered {
			continue
		}
		n := d.nodeLocked(w.txn)
		if queued && !w.det.registered {
			w.det.registered = true
			n.waiters = append(n.waiters, w)
		}
		// Both lists are sorted: merge them.
		added = added[:0]
		old := w.det.edges
		i, j := 0, 0
		for i < len(old) || j < len(want) {
			switch {
			case j == len(want) || (i < len(old) && old[i] < want[j]):
				d.removeEdgeLocked(n, old[i])
				i++
			case i == len(old) || want[j] < old[i]:
				if d.addEdgeLocked(n, want[j]) {
					added = append(added, want[j])
				}
				j++
			default:
				i++
				j++
			}
		}
		w.det.edges = slices.Clone(want)
		if !queued {
			w.det.registered = false
			n.waiters = slices.DeleteFunc(n.waiters, func(x *Waiter) bool { return x == w })
			d.forgetEmptyLocked(w.txn, n)
			continue
		}
		for _, to := range added {
			if w.det.doomed {
				break
			}
			path := d.pathLocked(to, w.txn)
			if path == nil {
				continue
			}
			victim := w.txn
			for _, x := range path {
				victim = max(victim, x)
			}
			doomed = d.doomLocked(victim, doomed)
		}
	}
	return doomed
}

// pathLocked searches depth first, in TxnID order, for a path from -> ...
// -> to, and returns its nodes without to, or nil.
func (d *Detector) pathLocked(from, to TxnID) []TxnID {
	type frame struct {
		txn  TxnID
		next int
	}
	fn := d.mu.nodes[from]
	if fn == nil {
		return nil // from waits for no one
	}
	d.mu.epoch++
	fn.visit = d.mu.epoch
	stack := []frame{{txn: from}}
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		n := d.mu.nodes[f.txn]
		if f.next == len(n.out) {
			stack = stack[:len(stack)-1]
			continue
		}
		v := n.out[f.next].to
		f.next++
		if v == to {
			path := make([]TxnID, len(stack))
			for i, fr := range stack {
				path[i] = fr.txn
			}
			return path
		}
		vn := d.mu.nodes[v]
		if vn == nil || vn.visit == d.mu.epoch {
			continue
		}
		vn.visit = d.mu.epoch
		stack = append(stack, frame{txn: v})
	}
	return nil
}

// doomLocked marks every registered waiter of victim as doomed and takes
// its edges out of the graph.
func (d *Detector) doomLocked(victim TxnID, doomed []*Waiter) []*Waiter {
	n := d.mu.nodes[victim]
	if n == nil {
		panic("concurrency: deadlock victim is not in the waits-for graph")
	}
	for _, w := range n.waiters {
		for _, to := range w.det.edges {
			d.removeEdgeLocked(n, to)
		}
		w.det.edges = nil
		w.det.registered = false
		w.det.doomed = true
		doomed = append(doomed, w)
	}
	n.waiters = nil
	d.forgetEmptyLocked(victim, n)
	return doomed
}
