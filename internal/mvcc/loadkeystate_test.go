package mvcc

import (
	"bytes"
	"errors"
	"testing"
)

// TestLoadKeyState checks that one LoadKeyState reads what GetPlain and
// PutIntent's (or ResolveIntent's) own read would, for a key with and
// without a plain value, an intent and versions, beside neighbours whose
// keys share its prefix; and that the Loaded writes decide as the plain
// ones do.
func TestLoadKeyState(t *testing.T) {
	e := newTestEngine(t)
	b := e.NewBatch()
	defer b.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Neighbours: "k\x00" (escaped after k's prefix), "k0", and "j".
	for _, n := range [][]byte{[]byte("k\x00"), []byte("k0"), []byte("j")} {
		must(PutPlain(b, n, []byte("neighbour")))
		must(PutIntent(b, n, []byte("x"), false, TxnMeta{StartTs: 3}))
	}
	k := []byte("k")

	// Nothing at k.
	st, err := LoadKeyState(b, k)
	must(err)
	if st.Plain() != nil {
		t.Fatalf("plain %q, want none", st.Plain())
	}
	must(PutIntentLoaded(b, st, k, []byte("v1"), false, TxnMeta{StartTs: 5}))
	if iv, found, err := GetIntent(b, k); err != nil || !found || !bytes.Equal(iv.Value, []byte("v1")) {
		t.Fatalf("intent after PutIntentLoaded: %+v (found %v), %v", iv, found, err)
	}

	// A plain value (empty), the intent of txn 5: another txn conflicts.
	must(PutPlain(b, k, []byte{}))
	st, err = LoadKeyState(b, k)
	must(err)
	if p := st.Plain(); p == nil || len(p) != 0 {
		t.Fatalf("plain %q (nil %v), want empty and present", p, p == nil)
	}
	var wc *WriteConflictError
	if err := PutIntentLoaded(b, st, k, []byte("v2"), false, TxnMeta{StartTs: 6}); !errors.As(err, &wc) || wc.Intent == nil {
		t.Fatalf("other txn's write over an intent: %v, want *WriteConflictError with Intent", err)
	}

	// Resolve at 8 through the loaded state; a version then conflicts
	// with a write that started below it.
	resolved, err := ResolveIntentLoaded(b, st, k, 5, 8)
	must(err)
	if !resolved {
		t.Fatal("ResolveIntentLoaded: not resolved")
	}
	must(PutPlain(b, k, []byte("record")))
	st, err = LoadKeyState(b, k)
	must(err)
	if !bytes.Equal(st.Plain(), []byte("record")) {
		t.Fatalf("plain %q, want record", st.Plain())
	}
	if err := PutIntentLoaded(b, st, k, []byte("v3"), false, TxnMeta{StartTs: 7}); !errors.As(err, &wc) || wc.ExistingTs != 8 {
		t.Fatalf("write below a version: %v, want *WriteConflictError at 8", err)
	}
	must(PutIntentLoaded(b, st, k, []byte("v3"), false, TxnMeta{StartTs: 9}))

	// Each matches the separate reads.
	for _, key := range [][]byte{k, []byte("k\x00"), []byte("k0"), []byte("j"), []byte("absent")} {
		st, err := LoadKeyState(b, key)
		must(err)
		want, found, err := GetPlain(b, key)
		must(err)
		if got := st.Plain(); (got != nil) != found || !bytes.Equal(got, want) {
			t.Fatalf("%q: plain %q, GetPlain %q (found %v)", key, got, want, found)
		}
		plainless, err := loadKeyState(b, key)
		must(err)
		if (st.st.intent == nil) != (plainless.intent == nil) || st.st.newestTs != plainless.newestTs {
			t.Fatalf("%q: state %+v, without the plain read %+v", key, st.st, plainless)
		}
	}
}
