package kvserver_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestSizeBasedSplit: with a follower down, several times the split
// threshold is written into one range; the range splits by size, and the
// follower, restarted, catches up on every range it missed.
func TestSizeBasedSplit(t *testing.T) {
	const limit = 256 << 10
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), RangeSplitBytes: limit})
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
	userRanges := func() int {
		st, err := c.Node(0).Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range st.Ranges {
			if d := r.Range; d != nil && bytes.Compare(d.StartKey, keys.UserPrefix) >= 0 {
				n++
			}
		}
		return n
	}
	before := userRanges()
	c.StopNode(2)
	// Random bytes: the threshold is on compressed sstable bytes.
	value := make([]byte, 64<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range value {
		value[i] = byte(rng.Uint32())
	}
	const puts = 64 // 4 MiB: 16 times the threshold
	for i := 0; i < puts; i++ {
		if err := db.Put(ctx, []byte(fmt.Sprintf("big/%03d", i)), value); err != nil {
			t.Fatal(err)
		}
	}
	// Liveness wait: sizes are read from sstables, so flush the memtables
	// until the balance loop has split.
	deadline := time.Now().Add(60 * time.Second)
	for userRanges() < before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("user ranges: %d before, %d after writing %d bytes with a %d-byte threshold", before, userRanges(), puts*len(value), limit)
		}
		for i := 0; i < 2; i++ {
			_ = c.Node(i).Engine().DB().Flush()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("user ranges: %d before, %d after", before, userRanges())
	if err := c.RestartNode(2); err != nil {
		t.Fatal(err)
	}
	// n3 holds every value once it has caught up on every range.
	count := func(i int) int {
		n := 0
		lo := keys.UserKey([]byte("big/"))
		_ = mvcc.IterateSpan(c.Node(i).Engine(), lo, keys.UserKey([]byte("big0")), func(_, _ []byte) error {
			n++
			return nil
		})
		return n
	}
	deadline = time.Now().Add(60 * time.Second)
	for count(2) != puts {
		if time.Now().After(deadline) {
			t.Fatalf("n3 holds %d of %d values after its restart", count(2), puts)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; i < puts; i += 7 {
		v, ok, err := db.Get(ctx, []byte(fmt.Sprintf("big/%03d", i)))
		if err != nil || !ok || !bytes.Equal(v, value) {
			t.Fatalf("big/%03d: %d bytes, found %v, err %v", i, len(v), ok, err)
		}
	}
}
