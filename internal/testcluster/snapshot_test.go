package testcluster_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/storage"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// indexRecord reads a range-local (index, term) record of rangeID from a
// node's engine: storage.SuffixApplied or storage.SuffixTruncated.
func indexRecord(t *testing.T, c *testcluster.Cluster, node int, rangeID uint64, suffix byte) uint64 {
	t.Helper()
	n := c.Node(node)
	if n == nil {
		t.Fatalf("node %d is stopped", node+1)
	}
	v, err := n.Engine().Get(storage.RangeLocalKey(rangeID, suffix))
	if errors.Is(err, storage.ErrNotFound) {
		return 0
	}
	if err != nil || len(v) != 16 {
		t.Fatalf("range-local record %q of range %d on node %d: %q, %v", suffix, rangeID, node+1, v, err)
	}
	return binary.BigEndian.Uint64(v)
}

// TestLaggingReplicaCatchesUpBySnapshot stops a follower of a range, keeps
// writing to the range until the leader has truncated its log past
// everything the follower applied (so the log alone can no longer bring it
// up to date), restarts the follower and checks that it catches up (by
// snapshot) to hold exactly the data of the others (I5), and that every
// acknowledged write is readable.
//
// It runs with every value in the LSM, and again with values separated
// into blob files (storage.ModePunch, a threshold every value here
// exceeds), where a snapshot must carry the values, not the sender's blob
// pointers, and blob GC runs meanwhile.
func TestLaggingReplicaCatchesUpBySnapshot(t *testing.T) {
	for _, mode := range []storage.Mode{storage.ModeInline, storage.ModePunch} {
		t.Run(mode.String(), func(t *testing.T) {
			testLaggingReplica(t, storage.Options{Mode: mode, ThresholdBytes: 8})
		})
	}
}

func testLaggingReplica(t *testing.T, so storage.Options) {
	c := startCluster(t, testcluster.Options{Nodes: 3, Storage: so})
	db := openDB(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), setupDeadline)
	defer cancel()
	if err := db.Put(ctx, []byte("snap/first"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	rangeID, leader, err := busiestRange(ctx, db, c, [][]byte{[]byte("snap/first")})
	if err != nil {
		t.Fatal(err)
	}
	follower := (leader + 1) % 3
	stoppedAt := indexRecord(t, c, follower, rangeID, storage.SuffixApplied)
	c.StopNode(follower)
	t.Logf("stopped n%d, a follower of range %d, at applied index %d", follower+1, rangeID, stoppedAt)

	// Write until the leader's log no longer holds the entry after the
	// follower's applied index. The bound only stops a test whose premise
	// fails (the log is never truncated); it is far above what is needed.
	const writesMax = 20000
	const writers = 8
	var written atomic.Int64
	var acked sync.Map
	truncatedPast := func() bool {
		for i := range 3 {
			if i != follower && c.Node(i) != nil && indexRecord(t, c, i, rangeID, storage.SuffixTruncated) <= stoppedAt {
				return false
			}
		}
		return true
	}
	var wg sync.WaitGroup
	var done atomic.Bool
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !done.Load() && written.Add(1) <= writesMax {
				k := fmt.Sprintf("snap/%d/%d", w, written.Load())
				if err := db.Put(ctx, []byte(k), []byte(k+"/value")); err != nil {
					errs <- fmt.Errorf("put %s: %w", k, err)
					return
				}
				acked.Store(k, true)
			}
		}()
	}
	for !done.Load() {
		if truncatedPast() {
			done.Store(true)
			break
		}
		if written.Load() > writesMax {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	done.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("writing while n%d is down: %v", follower+1, err)
	}
	if !truncatedPast() {
		t.Fatalf("after %d writes the leader's log is still not truncated past index %d: the premise of the test fails", writesMax, stoppedAt)
	}
	t.Logf("%d writes; the other replicas truncated their logs past n%d's applied index", written.Load(), follower+1)

	if err := c.RestartNode(follower); err != nil {
		t.Fatalf("restarting n%d: %v", follower+1, err)
	}
	checkReplicas(t, c)
	if applied := indexRecord(t, c, follower, rangeID, storage.SuffixApplied); applied <= stoppedAt {
		t.Fatalf("n%d applied index %d after catching up, not past %d", follower+1, applied, stoppedAt)
	}
	// Every acknowledged write is readable, now through whichever node
	// leads the range.
	missing := 0
	acked.Range(func(k, _ any) bool {
		v, found, err := db.Get(ctx, []byte(k.(string)))
		if err != nil || !found || string(v) != k.(string)+"/value" {
			if missing++; missing <= 10 {
				t.Errorf("acknowledged write %s: found %v, value %q, err %v", k, found, v, err)
			}
		}
		return true
	})
}
