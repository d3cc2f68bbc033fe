package kvserver_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestVersionGCSkipsCleanRanges: a GC round proposes nothing on a range
// that has nothing to collect (so an idle range is not woken once a
// minute), and collects again once the range is written.
func TestVersionGCSkipsCleanRanges(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), GCTTL: time.Millisecond, GCInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	db, err := client.Open(ctx, c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := keys.UserKey([]byte("k"))
	versions := func(i int) int {
		n := 0
		_ = mvcc.IterateSpan(c.Node(i).Engine(), key, keys.Next(key), func(_, _ []byte) error {
			n++
			return nil
		})
		return n
	}
	// applied returns each node's applied index of the range holding key.
	applied := func() [3]uint64 {
		var out [3]uint64
		for i := 0; i < 3; i++ {
			st, err := c.Node(i).Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range st.Ranges {
				d := r.Range
				if d != nil && bytes.Compare(d.StartKey, key) <= 0 && (len(d.EndKey) == 0 || bytes.Compare(key, d.EndKey) < 0) {
					out[i] = r.RaftAppliedIndex
				}
			}
		}
		return out
	}
	gcUntilOneVersion := func() {
		t.Helper()
		// Liveness wait: the threshold trails the oracle by the TTL.
		deadline := time.Now().Add(30 * time.Second)
		for versions(0) > 1 || versions(1) > 1 || versions(2) > 1 {
			if time.Now().After(deadline) {
				t.Fatalf("versions left: %d %d %d", versions(0), versions(1), versions(2))
			}
			for i := 0; i < 3; i++ {
				if _, err := c.Node(i).CollectGarbage(ctx); err != nil {
					t.Logf("gc on n%d: %v", i+1, err)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	put := func(v string) {
		t.Helper()
		if err := db.Put(ctx, []byte("k"), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []string{"a", "b", "c"} {
		put(v)
	}
	gcUntilOneVersion()
	// Every replica has applied the GC; the next rounds find the range
	// clean and propose nothing.
	before := applied()
	for round := 0; round < 3; round++ {
		for i := 0; i < 3; i++ {
			if _, err := c.Node(i).CollectGarbage(ctx); err != nil {
				t.Fatalf("gc on n%d: %v", i+1, err)
			}
		}
	}
	// Other commands than GC may reach the range meanwhile only if
	// something writes to it; nothing does here.
	if after := applied(); after != before {
		t.Fatalf("a GC round on a clean range proposed commands: applied index %v -> %v", before, after)
	}
	// A new version makes the range collectable again.
	put("d")
	if versions(0) < 2 && versions(1) < 2 && versions(2) < 2 {
		t.Fatal("the put left no second version")
	}
	gcUntilOneVersion()
	v, ok, err := db.Get(ctx, []byte("k"))
	if err != nil || !ok || string(v) != "d" {
		t.Fatalf("latest value after GC: %q %v %v", v, ok, err)
	}
}
