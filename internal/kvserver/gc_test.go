package kvserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestVersionGC: old versions are collected on every replica, the latest
// value stays, and a read below the GC threshold is refused with
// TS_BELOW_GC_THRESHOLD rather than answered from a partial history.
func TestVersionGC(t *testing.T) {
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
	early, err := db.Timestamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := db.Put(ctx, []byte("k"), []byte{byte('0' + i)}); err != nil {
			t.Fatal(err)
		}
	}
	versions := func(i int) int {
		n := 0
		k := keys.UserKey([]byte("k"))
		_ = mvcc.IterateSpan(c.Node(i).Engine(), k, keys.Next(k), func(pk, _ []byte) error {
			n++
			return nil
		})
		return n
	}
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
