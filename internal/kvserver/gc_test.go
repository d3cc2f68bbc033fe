package kvserver_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// gcFixture starts a cluster whose version GC collects at once (TTL 1ms)
// but only when a test calls CollectGarbage, and a client of it.
func gcFixture(t *testing.T) (*testcluster.Cluster, *client.DB) {
	t.Helper()
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), GCTTL: time.Millisecond, GCInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	db, err := client.Open(context.Background(), c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return c, db
}

// versionsOn counts the physical versions of user key k on node i.
func versionsOn(c *testcluster.Cluster, i int, k string) int {
	n := 0
	key := keys.UserKey([]byte(k))
	_ = mvcc.IterateSpan(c.Node(i).Engine(), key, keys.Next(key), func(_, _ []byte) error {
		n++
		return nil
	})
	return n
}

// gcUntilOneVersion runs GC rounds on every node until k has one version
// on each (a liveness wait: the threshold trails the oracle by the TTL).
func gcUntilOneVersion(t *testing.T, c *testcluster.Cluster, k string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for versionsOn(c, 0, k) > 1 || versionsOn(c, 1, k) > 1 || versionsOn(c, 2, k) > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("versions left: %d %d %d", versionsOn(c, 0, k), versionsOn(c, 1, k), versionsOn(c, 2, k))
		}
		for i := 0; i < 3; i++ {
			if _, err := c.Node(i).CollectGarbage(ctx); err != nil {
				t.Logf("gc on n%d: %v", i+1, err)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestVersionGC: old versions are collected on every replica, the latest
// value stays, and a read below the GC threshold is refused with
// TS_BELOW_GC_THRESHOLD rather than answered from a partial history.
func TestVersionGC(t *testing.T) {
	c, db := gcFixture(t)
	ctx := context.Background()
	early, err := db.Timestamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := db.Put(ctx, []byte("k"), []byte{byte('0' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	gcUntilOneVersion(t, c, "k")
	v, ok, err := db.Get(ctx, []byte("k"))
	if err != nil || !ok || string(v) != "4" {
		t.Fatalf("latest value after GC: %q %v %v", v, ok, err)
	}
	rc := newRaw(t, c.Addrs())
	resp := rc.send(keys.UserKey([]byte("k")), &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Get{Get: &rpcpb.GetRequest{Key: keys.UserKey([]byte("k")), Ts: early, TxnStart: early}}})
	if resp.Error.GetCode() != rpcpb.ErrorCode_TS_BELOW_GC_THRESHOLD {
		t.Fatalf("read below the GC threshold: got %v, want TS_BELOW_GC_THRESHOLD", resp.Error)
	}
}

// TestVersionGCSkipsCleanRanges: a GC round proposes nothing on a range
// that has nothing to collect (so an idle range is not woken once a
// minute), and collects again once the range is written.
func TestVersionGCSkipsCleanRanges(t *testing.T) {
	c, db := gcFixture(t)
	ctx := context.Background()
	key := keys.UserKey([]byte("k"))
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
	put := func(v string) {
		t.Helper()
		if err := db.Put(ctx, []byte("k"), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []string{"a", "b", "c"} {
		put(v)
	}
	gcUntilOneVersion(t, c, "k")
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
	// Nothing else writes to the range here.
	if after := applied(); after != before {
		t.Fatalf("a GC round on a clean range proposed commands: applied index %v -> %v", before, after)
	}
	// A new version makes the range collectable again.
	put("d")
	if versionsOn(c, 0, "k") < 2 && versionsOn(c, 1, "k") < 2 && versionsOn(c, 2, "k") < 2 {
		t.Fatal("the put left no second version")
	}
	gcUntilOneVersion(t, c, "k")
	v, ok, err := db.Get(ctx, []byte("k"))
	if err != nil || !ok || string(v) != "d" {
		t.Fatalf("latest value after GC: %q %v %v", v, ok, err)
	}
}
