package hierarchy

import (
	"errors"
	"testing"
)

func TestParseTree(t *testing.T) {
	for _, tc := range []struct{ in, out string }{
		{"(1 2 3)", "(1 2 3)"},
		{" ( (1,2) (3 4) ) ", "((1 2) (3 4))"},
		{"(1)", "(1)"},
		{"((1 2 3 4) (5 6 7 8))", "((1 2 3 4) (5 6 7 8))"},
		{"((1 (2 3)) 4)", "((1 (2 3)) 4)"},
	} {
		tr, err := ParseTree(tc.in)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if tr.String() != tc.out {
			t.Fatalf("%q: written %q, want %q", tc.in, tr.String(), tc.out)
		}
	}
	for _, in := range []string{"", "1", "()", "(1 1)", "(1 (2)", "(1 2))", "(0)", "(1 x)", "(-1)"} {
		if _, err := ParseTree(in); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("%q: got %v, want an invalid argument", in, err)
		}
	}
}

func TestTreeShape(t *testing.T) {
	tr, err := ParseTree("((1 2 3 4) (5 6 7 8))")
	if err != nil {
		t.Fatal(err)
	}
	levels := tr.Levels()
	if len(levels) != 3 || len(levels[0]) != 8 || len(levels[1]) != 2 || len(levels[2]) != 1 {
		t.Fatalf("levels %v", levels)
	}
	for _, tc := range []struct {
		nodes []NodeID
		level int
	}{
		{[]NodeID{3}, 0},
		{[]NodeID{1, 4}, 1},
		{[]NodeID{5, 6, 7, 8}, 1},
		{[]NodeID{4, 5}, 2},
	} {
		d, ok := tr.Decider(tc.nodes)
		if !ok || tr.Level(d) != tc.level {
			t.Fatalf("decider of %v: v%d at level %d, want level %d", tc.nodes, d, tr.Level(d), tc.level)
		}
	}
	if _, ok := tr.Decider([]NodeID{1, 9}); ok {
		t.Fatal("decider of a node not in the tree")
	}
	// Slots left to right, for the round robin of 3.3.2.
	for n := NodeID(1); n <= 8; n++ {
		leaf, _ := tr.Leaf(n)
		if tr.Slot(leaf) != int(n) || tr.Node(leaf) != n || !tr.IsLeaf(leaf) {
			t.Fatalf("node %d: leaf v%d slot %d", n, leaf, tr.Slot(leaf))
		}
	}
	def, err := DefaultTree([]NodeID{1, 2, 3})
	if err != nil || def.String() != "(1 2 3)" {
		t.Fatalf("default tree %v, %v", def, err)
	}
}

// TestRoundRobin: the timestamp variant's leaves issue disjoint
// timestamps, each the smallest of its own above the base (3.3.2).
func TestRoundRobin(t *testing.T) {
	tr, _ := DefaultTree([]NodeID{1, 2, 3, 4, 5, 6, 7, 8})
	seen := map[uint64]bool{}
	for n := NodeID(1); n <= 8; n++ {
		leaf, _ := tr.Leaf(n)
		v, err := New(Config{Tree: tr, ID: leaf, Variant: Timestamps}, Recovery{})
		if err != nil {
			t.Fatal(err)
		}
		for base := uint64(0); base < 40; base++ {
			ts := v.nextTS(base)
			if ts <= base || ts > base+8 || ts%8 != uint64(n)%8 {
				t.Fatalf("leaf of node %d: nextTS(%d) = %d", n, base, ts)
			}
			seen[ts] = true
		}
	}
	if v, _ := New(Config{Tree: tr, ID: 2, Variant: Timestamps}, Recovery{}); v.nextTS(3) != 10 {
		t.Fatalf("the thesis's example: snapshot 3 at the second of 8 leaves gives %d, not 10", v.nextTS(3))
	}
}

func TestConfigValidate(t *testing.T) {
	tr, _ := DefaultTree([]NodeID{1, 2})
	for _, c := range []Config{
		{},
		{Tree: tr, ID: 7},
		{Tree: tr, Variant: 9},
		{Tree: tr, ValidatorBatch: Batching{SizeMax: BatchSizeMaxMax + 1}},
		{Tree: tr, NodeBatch: Batching{Timeout: -1}},
		{Tree: tr, NodeBatch: Batching{Timeout: 2 * BatchTimeoutMax}},
		{Tree: tr, PendingMax: -1},
		{Tree: tr, LatestKeysMax: 1},
	} {
		if _, err := New(c, Recovery{}); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("%+v: got %v", c, err)
		}
	}
	if _, err := New(Config{Tree: tr}, Recovery{ClockFloor: 5}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("an inner validator with a recovery: %v", err)
	}
}

// TestOverloaded: a leaf refuses parts beyond PendingMax, retryably.
func TestOverloaded(t *testing.T) {
	tr, _ := DefaultTree([]NodeID{1, 2})
	v, _ := New(Config{Tree: tr, ID: 1, PendingMax: 2}, Recovery{})
	for i := 1; i <= 3; i++ {
		err := v.Propose(Part{Txn: TxnID(i), Nodes: []NodeID{1, 2}, Writes: []string{string(rune('a' + i))}})
		if i <= 2 && err != nil || i == 3 && !errors.Is(err, ErrOverloaded) {
			t.Fatalf("part %d: %v", i, err)
		}
	}
	// A local transaction holds nothing and is still taken.
	if err := v.Propose(Part{Txn: 9, Nodes: []NodeID{1}, Writes: []string{"z"}}); err != nil {
		t.Fatal(err)
	}
}

// TestLatestEviction: when the latest-version table is full, the lower
// half goes and the floor rises to the highest dropped version; a key not
// in the table then counts as written at the floor (a conservative abort
// for older snapshots, never a missed conflict).
func TestLatestEviction(t *testing.T) {
	tr, _ := DefaultTree([]NodeID{1, 2})
	v, _ := New(Config{Tree: tr, ID: 1, LatestKeysMax: 4}, Recovery{})
	for i, k := range []string{"a", "b", "c", "d", "e"} {
		if err := v.Propose(Part{Txn: TxnID(10 * (i + 1)), Snapshot: uint64(10 * (i + 1)), Nodes: []NodeID{1}, Writes: []string{k}}); err != nil {
			t.Fatal(err)
		}
	}
	// Versions a@11 b@21 c@31 d@41 e@51: five over four, so a and b go.
	if len(v.latest) != 3 || v.latestFloor != 21 {
		t.Fatalf("latest %v floor %d", v.latest, v.latestFloor)
	}
	for _, tc := range []struct {
		key  string
		snap uint64
		ok   bool
	}{
		{"a", 20, false}, // a's version 11 is gone, but the floor is 21
		{"z", 20, false}, // never written: still counts as at the floor
		{"z", 21, true},
		{"c", 30, false}, // kept exactly
		{"c", 31, true},
	} {
		if got := v.check(Part{Snapshot: tc.snap, Writes: []string{tc.key}}); got != tc.ok {
			t.Fatalf("%s at snapshot %d: passes %v, want %v", tc.key, tc.snap, got, tc.ok)
		}
	}
}
