package mvcc

import (
	"errors"
	"fmt"
	"testing"

	"github.com/canopy-db/canopy/internal/storage"
)

// TestScanIntentsMax checks that one scan reports at most ScanIntentsMax
// intents, the first ones in key order.
func TestScanIntentsMax(t *testing.T) {
	e := newTestEngine(t)
	b := e.NewBatch()
	defer b.Close()
	for i := 0; i < ScanIntentsMax+5; i++ {
		if err := PutIntent(b, []byte(fmt.Sprintf("k%05d", i)), []byte("v"), false, TxnMeta{StartTs: 7}); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := Scan(b, nil, nil, 10, 0, 0, 0)
	var ie *IntentError
	if !errors.As(err, &ie) {
		t.Fatalf("scan: %v, want *IntentError", err)
	}
	if len(ie.Intents) != ScanIntentsMax {
		t.Fatalf("%d intents, want %d", len(ie.Intents), ScanIntentsMax)
	}
	if got := string(ie.Intents[ScanIntentsMax-1].Key); got != fmt.Sprintf("k%05d", ScanIntentsMax-1) {
		t.Fatalf("last intent at %q", got)
	}
}

// TestCorruptionSurfaces checks that undecodable stored bytes reach the
// caller as storage.ErrCorruption from every read and write path, and are
// never taken for a missing key.
func TestCorruptionSurfaces(t *testing.T) {
	k := []byte("k")
	for _, tc := range []struct {
		name     string
		physical []byte
		value    []byte
		// notRead names the functions that never look at these bytes:
		// GC skips intents, Refresh needs only version timestamps.
		notRead string
	}{
		{name: "intent value", physical: IntentKey(k), value: []byte{9, 9}, notRead: "GC"},
		{name: "version value", physical: VersionKey(k, 5), value: []byte{7}, notRead: "Refresh"},
		{name: "version key", physical: append(IntentKey(k), 1, 2), value: []byte{versionTagValue}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t)
			b := e.NewBatch()
			defer b.Close()
			if err := b.Set(tc.physical, tc.value); err != nil {
				t.Fatal(err)
			}
			checks := map[string]error{}
			_, _, _, checks["Get"] = Get(b, k, 10, 0)
			_, _, checks["Scan"] = Scan(b, nil, nil, 10, 0, 0, 0)
			checks["Refresh"] = Refresh(b, k, nil, 1, 10, 0)
			checks["PutIntent"] = PutIntent(b, k, []byte("v"), false, TxnMeta{StartTs: 20})
			checks["PutCommitted"] = PutCommitted(b, k, []byte("v"), false, 20)
			_, checks["ResolveIntent"] = ResolveIntent(b, k, 3, 20)
			_, checks["GC"] = GC(b, nil, nil, 100)
			for name, err := range checks {
				if name == tc.notRead {
					continue
				}
				if !errors.Is(err, storage.ErrCorruption) {
					t.Errorf("%s: %v, want ErrCorruption", name, err)
				}
			}
		})
	}
}
