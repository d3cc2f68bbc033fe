package kvserver

import (
	"slices"
	"sync/atomic"
	"testing"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/hierarchy"
)

// TestWithoutUndecidedForgetsOrder: withoutUndecided forgets the undecided
// marks in overrideOrder as well as in overrides (it left them in the
// order: a leak that grew with every persist that failed, and whose trim
// later deleted live overrides), and keeps the other overrides in order.
func TestWithoutUndecidedForgetsOrder(t *testing.T) {
	l := &hierLoop{overrides: map[hierarchy.TxnID]hierarchy.Decision{}}
	check := func(when string, want ...hierarchy.TxnID) {
		t.Helper()
		if !slices.Equal(l.overrideOrder, want) {
			t.Fatalf("%s: overrideOrder = %v; want %v", when, l.overrideOrder, want)
		}
		if len(l.overrides) != len(want) {
			t.Fatalf("%s: %d overrides for an order of %d", when, len(l.overrides), len(want))
		}
		for _, id := range want {
			if _, ok := l.overrides[id]; !ok {
				t.Fatalf("%s: %d is in the order but not in overrides", when, id)
			}
		}
	}
	l.override(hierarchy.Decision{Txn: 1, Commit: true, TS: 10}, false)
	l.override(hierarchy.Decision{Txn: 2}, true)
	l.override(hierarchy.Decision{Txn: 3}, false)
	l.override(hierarchy.Decision{Txn: 4}, true)
	check("before", 1, 2, 3, 4)
	l.withoutUndecided(hierarchy.Ready{})
	check("after the first", 1, 3)
	// Marked undecided again, then decided: it appears once.
	l.override(hierarchy.Decision{Txn: 2}, true)
	l.withoutUndecided(hierarchy.Ready{})
	l.override(hierarchy.Decision{Txn: 2, Commit: true, TS: 20}, false)
	check("after the second", 1, 3, 2)
	// Many rounds of failed persists leave nothing behind.
	for i := 0; i < 1000; i++ {
		l.override(hierarchy.Decision{Txn: hierarchy.TxnID(100 + i)}, true)
		l.withoutUndecided(hierarchy.Ready{})
	}
	check("after 1000 failed persists", 1, 3, 2)
	if d := l.overrides[2]; !d.Commit || d.TS != 20 {
		t.Fatalf("override of 2 = %+v", d)
	}
}

// TestSendLoopKeepsOrder: an inner validator's sender lets a Ready's
// messages leave only once the write of its own decisions is over, and in
// the order the loop made the Readies, even when later writes end first.
func TestSendLoopKeepsOrder(t *testing.T) {
	l := &hierLoop{overrides: map[hierarchy.TxnID]hierarchy.Decision{},
		out: make(chan *outReady, 8), sendDone: make(chan struct{})}
	const n = 5
	var written [n]atomic.Bool
	var routed []int
	go l.sendLoop(func(ms []hierarchy.Message) {
		for _, m := range ms {
			i := int(m.Result.Txn)
			if !written[i].Load() {
				t.Errorf("Ready %d routed before its decisions were written", i)
			}
			routed = append(routed, i)
		}
	})
	var os []*outReady
	for i := 0; i < n; i++ {
		d := hierarchy.Decision{Txn: hierarchy.TxnID(i), Commit: true, TS: uint64(100 + i)}
		o := &outReady{done: make(chan struct{}), rd: hierarchy.Ready{
			Decisions: []hierarchy.Decision{d},
			Messages:  []hierarchy.Message{{Kind: hierarchy.MsgDecisions, Decisions: []hierarchy.Decision{d}, Result: d}},
		}}
		o.res = recorded{held: []client.TxnDecision{{StartTs: uint64(i), Committed: true, CommitTs: d.TS}}, recorded: []bool{true}}
		os = append(os, o)
		l.out <- o
	}
	// The writes end last to first.
	for i := n - 1; i >= 0; i-- {
		written[i].Store(true)
		close(os[i].done)
	}
	close(l.out)
	<-l.sendDone
	if want := []int{0, 1, 2, 3, 4}; !slices.Equal(routed, want) {
		t.Fatalf("routed %v; want %v", routed, want)
	}
}
