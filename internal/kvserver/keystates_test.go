package kvserver

import (
	"testing"

	"github.com/canopy-db/canopy/internal/eval"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/storage"
)

// TestKeyStates steps the key cache through what the state machine tells
// it: an entry is used only in the generation it was noted in and by Puts
// of the term of the commands applied last; a command of version Sets of
// that term raises the newest version of the keys it writes; anything
// else (an intent here, a version deleted, a command of another term, any
// command while the cache is empty) forgets everything, and the commit of
// the batch (flushed) starts one more generation.
func TestKeyStates(t *testing.T) {
	eng, err := storage.Open(t.TempDir(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	repr := func(write func(b *storage.Batch)) []byte {
		b := eng.NewWriteBatch()
		defer b.Close()
		write(b)
		return append([]byte(nil), b.Repr()...)
	}
	versions := func(sets map[string]mvcc.Timestamp) []byte {
		return repr(func(w *storage.Batch) {
			for k, ts := range sets {
				_ = w.Set(mvcc.VersionKey([]byte(k), ts), mvcc.EncodeVersionValue([]byte("v"), false))
			}
		})
	}
	a, b := []byte("a"), []byte("b")
	var c keyStates
	t5 := c.at(5)
	// genOf is the generation a Put of ks would note under.
	genOf := func(ks eval.KeyStates) uint64 {
		_, g, _ := ks.Known([]byte("no such key"))
		return g
	}
	known := func(ks eval.KeyStates, k []byte, want mvcc.Timestamp, wantOK bool) {
		t.Helper()
		got, _, ok := ks.Known(k)
		if ok != wantOK || got != want {
			t.Fatalf("Known(%q) = %d, %v; want %d, %v", k, got, ok, want, wantOK)
		}
	}
	// Nothing applied in term 5 yet: nothing is noted.
	if g := genOf(t5); g != 0 {
		t.Fatalf("Gen before any command of the term = %d, want 0", g)
	}
	t5.Note(a, 5, genOf(t5))
	known(t5, a, 0, false)

	// A command of term 5 applies and commits: Puts of term 5 note.
	c.applied(eng, 5, versions(map[string]mvcc.Timestamp{"z": 1}))
	c.flushed()
	g := genOf(t5)
	t5.Note(a, 5, g)
	t5.Note(b, 7, g)
	known(t5, a, 5, true)
	known(c.at(6), a, 0, false) // a Put of another term learns nothing

	// Version Sets of the term: a's newest rises; b's lower version
	// leaves it at 7; no new generation.
	c.applied(eng, 5, versions(map[string]mvcc.Timestamp{"a": 9, "b": 6}))
	c.flushed()
	known(t5, a, 9, true)
	known(t5, b, 7, true)
	if genOf(t5) != g {
		t.Fatal("version Sets started a new generation")
	}
	t5.Note(a, 8, g) // a note never lowers what the cache knows
	known(t5, a, 9, true)

	// An intent forgets everything; a note taken before it is refused,
	// and so is one taken after it but before its batch committed.
	c.applied(eng, 5, repr(func(w *storage.Batch) { _ = w.Set(mvcc.IntentKey(b), []byte("intent")) }))
	known(t5, a, 0, false)
	t5.Note(a, 9, g)
	known(t5, a, 0, false)
	before := genOf(t5)
	c.flushed()
	t5.Note(a, 9, before)
	known(t5, a, 0, false)

	// Version Sets of another term forget too (another leaseholder's).
	g = genOf(t5)
	t5.Note(a, 9, g)
	known(t5, a, 9, true)
	c.applied(eng, 6, versions(map[string]mvcc.Timestamp{"b": 20}))
	c.flushed()
	known(t5, a, 0, false)
	if genOf(t5) != 0 {
		t.Fatal("a Put of term 5 may still note after a command of term 6 applied")
	}

	// A version deleted (GC's kind of write) forgets.
	t6 := c.at(6)
	g = genOf(t6)
	t6.Note(a, 9, g)
	c.applied(eng, 6, repr(func(w *storage.Batch) { _ = w.Delete(mvcc.VersionKey(b, 3)) }))
	known(t6, a, 0, false)

	// With no entry, any command forgets (nothing is decoded): a note
	// taken before it is refused.
	c.flushed()
	g = genOf(t6)
	c.applied(eng, 6, versions(map[string]mvcc.Timestamp{"b": 21}))
	t6.Note(a, 9, g)
	known(t6, a, 0, false)

	// forget (splits, snapshots, other command forms) works the same way.
	c.flushed()
	g = genOf(t6)
	t6.Note(a, 9, g)
	c.forget()
	known(t6, a, 0, false)
}
