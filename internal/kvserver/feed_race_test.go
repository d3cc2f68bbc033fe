package kvserver_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestRangeFeedRegistersWithoutAGap: a write that applies between a
// rangefeed's processor install and its registration is delivered, either
// by the catch-up scan or live, never lost in between.
//
// The hook orders it: the first rangefeed, once it has its processor,
// waits for a put of "race" to be acknowledged (applied and published to
// the processor, which has no registration yet) before it registers.
// Before the fix the catch-up snapshot was taken before that wait: it did
// not hold the put, and the registration came after its publication, so
// the watcher never saw it (a watch of the etcd API skipped two
// acknowledged puts this way once in 390 loaded runs of
// TestWatchMatchesHistoryAcrossLeaseholderRestart).
func TestRangeFeedRegistersWithoutAGap(t *testing.T) {
	var (
		armed    atomic.Bool
		once     sync.Once
		putErr   error
		putDB    atomic.Pointer[client.DB]
		hookDone = make(chan struct{})
	)
	restore := kvserver.SetBeforeFeedRegister(func(n *kvserver.Node, rangeID uint64) {
		if !armed.Load() {
			return
		}
		once.Do(func() {
			defer close(hookDone)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			putErr = putDB.Load().Put(ctx, []byte("race"), []byte("v"))
		})
	})
	defer restore()
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := client.Open(ctx, c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	putDB.Store(db)
	if err := db.Put(ctx, []byte("before"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	w, err := db.Watch(ctx, client.Span{Start: []byte("a"), End: []byte("z")}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	select {
	case <-hookDone:
	case <-ctx.Done():
		t.Fatal("no rangefeed registered")
	}
	if putErr != nil {
		t.Fatalf("put during registration: %v", putErr)
	}
	after, err := db.Timestamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every change at or below a resolved timestamp has been delivered
	// before it; the put was acknowledged before `after` was handed out.
	var got []string
	for ev := range w.Events() {
		if ev.Resolved == 0 {
			got = append(got, string(ev.Key))
			continue
		}
		if ev.Resolved >= after {
			break
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("the watch did not resolve %d: %v", after, w.Err())
	}
	for _, k := range got {
		if k == "race" {
			return
		}
	}
	t.Fatalf("the put made while the rangefeed registered was never delivered (changes: %q)", got)
}
