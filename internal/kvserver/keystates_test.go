package kvserver

import (
	"testing"

	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/storage"
)

// TestKeyStates steps the key cache through what the state machine tells
// it: an entry is used only in the generation it was noted in; a command
// of version Sets raises the newest version of the keys it writes; any
// other write (an intent here) forgets everything, and so does forget.
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
	a, b := []byte("a"), []byte("b")
	var c keyStates
	known := func(k []byte, want mvcc.Timestamp, wantOK bool) {
		t.Helper()
		got, ok := c.Known(k)
		if ok != wantOK || got != want {
			t.Fatalf("Known(%q) = %d, %v; want %d, %v", k, got, ok, want, wantOK)
		}
	}
	known(a, 0, false)
	g := c.Gen()
	c.Note(a, 5, g)
	known(a, 5, true)
	known(b, 0, false)

	// A note taken in an older generation is dropped.
	c.forget()
	known(a, 0, false)
	c.Note(a, 5, g)
	known(a, 0, false)

	g = c.Gen()
	c.Note(a, 5, g)
	c.Note(b, 7, g)
	// Version Sets: a's newest rises; b's lower version leaves it at 7.
	c.applied(eng, repr(func(w *storage.Batch) {
		_ = w.Set(mvcc.VersionKey(a, 9), mvcc.EncodeVersionValue([]byte("x"), false))
		_ = w.Set(mvcc.VersionKey(b, 6), mvcc.EncodeVersionValue([]byte("y"), false))
	}))
	known(a, 9, true)
	known(b, 7, true)
	if c.Gen() != g {
		t.Fatal("version Sets started a new generation")
	}
	// A note never lowers what the cache knows in its generation.
	c.Note(a, 8, g)
	known(a, 9, true)

	// An intent (any write but a version Set) forgets everything.
	c.applied(eng, repr(func(w *storage.Batch) {
		_ = w.Set(mvcc.VersionKey(b, 10), mvcc.EncodeVersionValue([]byte("y"), false))
		_ = w.Set(mvcc.IntentKey(a), []byte("intent"))
	}))
	known(a, 0, false)
	known(b, 0, false)

	// A version deleted (GC's kind of write) forgets too.
	g = c.Gen()
	c.Note(a, 9, g)
	c.applied(eng, repr(func(w *storage.Batch) { _ = w.Delete(mvcc.VersionKey(b, 3)) }))
	known(a, 0, false)

	// With no entry, nothing is decoded and nothing is forgotten: a Put
	// reading meanwhile reads a key the command did not write.
	g = c.Gen()
	c.applied(eng, repr(func(w *storage.Batch) { _ = w.Set(mvcc.IntentKey(b), []byte("intent")) }))
	c.Note(a, 9, g)
	known(a, 9, true)
}
