package kvserver

import (
	"slices"
	"testing"

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
