package kvserver

import (
	"slices"
	"testing"

	"github.com/canopy-db/canopy/internal/hierarchy"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
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

// TestResolvingBlocksParts: a part touching a key whose intents a
// background resolution has not finished with waits (blocked) until every
// resolution of that key has ended; other keys and messages never wait.
func TestResolvingBlocksParts(t *testing.T) {
	l := &hierLoop{resolving: map[string]int{}, resolved: resolvedQueue{ready: make(chan struct{}, 1)}}
	part := func(reads, writes string) *hierInput {
		req := &rpcpb.HierCommitRequest{}
		if reads != "" {
			req.Reads = [][]byte{[]byte(reads)}
		}
		if writes != "" {
			req.Writes = []*rpcpb.HierWrite{{Key: []byte(writes)}}
		}
		return &hierInput{part: &hierPartIn{req: req}}
	}
	msg := &hierInput{msg: &hierarchy.Message{}}
	if l.blocked(part("a", "")) || l.blocked(msg) {
		t.Fatal("blocked with nothing being resolved")
	}
	// Two resolutions of a (two decided transactions wrote it), one of b.
	l.resolving["a"], l.resolving["b"] = 2, 1
	for _, c := range []struct {
		in   *hierInput
		want bool
	}{{part("a", ""), true}, {part("", "b"), true}, {part("c", "d"), false}, {msg, false}} {
		if got := l.blocked(c.in); got != c.want {
			t.Fatalf("blocked(%v) = %v, want %v", c.in.part, got, c.want)
		}
	}
	l.resolved.push([][]byte{[]byte("a"), []byte("b")})
	if !l.blocked(part("a", "")) {
		t.Fatal("a unblocked while one of its two resolutions runs")
	}
	if l.blocked(part("", "b")) {
		t.Fatal("b still blocked after its resolution ended")
	}
	l.resolved.push([][]byte{[]byte("a")})
	<-l.resolved.ready // the loop's wake-up
	if l.blocked(part("a", "")) || len(l.resolving) != 0 {
		t.Fatalf("after every resolution ended: resolving = %v", l.resolving)
	}
}
