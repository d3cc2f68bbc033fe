package kvserver

import (
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"testing"

	"github.com/canopy-db/canopy/internal/hierarchy"
	"github.com/canopy-db/canopy/internal/storage"
)

// TestPartRecords: part records come back as written (by the recorder, in
// the order queued: a deletion queued after a write removes it), in
// start_ts order, go when forgotten, and a damaged one is reported as
// corruption.
func TestPartRecords(t *testing.T) {
	eng, err := storage.Open(t.TempDir(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	prs := []hierarchy.PartResult{
		{Part: hierarchy.Part{Txn: 30, Client: 1, Snapshot: 30, Nodes: []hierarchy.NodeID{1, 3},
			Reads: []string{"\x01a", "\x01b"}, Writes: []string{"\x01b"}}, OK: true, TS: 41},
		{Part: hierarchy.Part{Txn: 7, Client: 2, Snapshot: 7, Nodes: []hierarchy.NodeID{2, 3},
			Reads: []string{"\x01c"}}, OK: true, TS: 9},
	}
	dropped := 0
	r := newPartRecorder(eng, slog.Default(), func(k int) { dropped += k })
	r.queue(recordOp{txn: 30, rec: &prs[0]}, recordOp{txn: 8, rec: &prs[1]}, recordOp{txn: 7, rec: &prs[1]}, recordOp{txn: 8})
	r.stop()
	if dropped != 0 {
		t.Fatalf("%d record ops dropped", dropped)
	}
	got, err := loadPartRecords(eng)
	if err != nil {
		t.Fatal(err)
	}
	if want := []hierarchy.PartResult{prs[1], prs[0]}; !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded %+v\nwant %+v", got, want)
	}
	// A deletion queued in a later batch removes a record written before.
	r = newPartRecorder(eng, slog.Default(), func(k int) { dropped += k })
	r.queue(recordOp{txn: 7})
	r.stop()
	if got, _ := loadPartRecords(eng); len(got) != 1 || got[0].Part.Txn != 30 {
		t.Fatalf("after forgetting txn 7: %+v", got)
	}
	b := eng.NewWriteBatch()
	if err := b.Set(hierPartRecordKey(31), []byte{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(true); err != nil {
		t.Fatal(err)
	}
	if _, err := loadPartRecords(eng); !errors.Is(err, storage.ErrCorruption) {
		t.Fatalf("a damaged record: err = %v, want corruption", err)
	}
}

// TestPlanRecovery: a restarted leaf resolves the records the status
// table decides, aborts those that may not wait (too old, a failed vote,
// a local transaction, beyond PendingMax), and gives back the rest.
func TestPlanRecovery(t *testing.T) {
	tree, err := hierarchy.DefaultTree([]hierarchy.NodeID{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := tree.Leaf(1)
	part := func(txn hierarchy.TxnID, ok bool, ts uint64, nodes ...hierarchy.NodeID) hierarchy.PartResult {
		return hierarchy.PartResult{Part: hierarchy.Part{Txn: txn, Client: hierarchy.ClientID(nodes[0]), Snapshot: uint64(txn),
			Nodes: nodes, Writes: []string{"\x01k" + string(rune('a'+txn))}}, OK: ok, TS: ts}
	}
	recs := []hierarchy.PartResult{
		part(60, true, 61, 1, 2), // undecided, fresh: pending
		part(10, true, 12, 1, 2), // committed at 15
		part(20, true, 21, 1, 3), // aborted
		part(30, true, 31, 1, 3), // undecided, too old
		part(40, false, 41, 1, 2),
		part(50, true, 51, 1),       // local: never recorded, never given back
		part(70, true, 95, 1, 2),    // undecided, fresh: beyond PendingMax
		part(80, true, 81, 1, 2),    // undecided, fresh: beyond PendingMax
		part(90, true, 90, 1, 2, 3), // decided: commit at 99
	}
	decided := map[uint64]uint64{10: 15, 20: 0, 90: 99}
	tooOld := func(t hierarchy.TxnID) bool { return t < 35 }
	p := planRecovery(recs, decided, tooOld, tree, leaf, 1)
	if got := p.pending; len(got) != 1 || got[0].Part.Txn != 60 {
		t.Errorf("pending = %+v, want txn 60 only", got)
	}
	wantResolve := []hierarchy.Decision{{Txn: 10, Commit: true, TS: 15}, {Txn: 20}, {Txn: 90, Commit: true, TS: 99}}
	if !slices.Equal(p.resolve, wantResolve) {
		t.Errorf("resolve = %+v, want %+v", p.resolve, wantResolve)
	}
	if want := []hierarchy.TxnID{30, 40, 50, 70, 80}; !slices.Equal(p.abort, want) {
		t.Errorf("abort = %v, want %v", p.abort, want)
	}
	if p.clockFloor != 99 {
		t.Errorf("clock floor %d, want 99 (the highest timestamp and commit timestamp)", p.clockFloor)
	}
	if ws := p.writes[60]; len(ws) != 1 || string(ws[0]) != "\x01k"+string(rune('a'+60)) {
		t.Errorf("writes of txn 60 = %q", ws)
	}
}
