package kvserver_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestLoadBasedSplit: reads spread over a range's keys, above the QPS
// threshold for longer than LoadSplitAfter, make its leaseholder split it;
// reads of one hot key do not.
func TestLoadBasedSplit(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), RangeSplitQPS: 50, LoadSplitAfter: 2 * time.Second})
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
	for i := 0; i < 100; i++ {
		if err := db.Put(ctx, []byte(fmt.Sprintf("k%03d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	before := userRanges()
	read := func(d time.Duration, key func(i int) string) {
		stop := time.Now().Add(d)
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; time.Now().Before(stop); i += 4 {
					if _, _, err := db.Get(ctx, []byte(key(i))); err != nil {
						t.Error(err)
						return
					}
				}
			}(w)
		}
		wg.Wait()
	}
	// One hot key: no key divides its load.
	read(4*time.Second, func(int) string { return "k042" })
	if n := userRanges(); n != before {
		t.Fatalf("a single hot key split the range: %d user ranges, %d before", n, before)
	}
	// Spread load: split (a liveness wait, bounded).
	deadline := time.Now().Add(60 * time.Second)
	for userRanges() == before {
		if time.Now().After(deadline) {
			t.Fatalf("no load-based split after 60 s of reads over 100 keys")
		}
		read(time.Second, func(i int) string { return fmt.Sprintf("k%03d", (i*37)%100) })
	}
	t.Logf("user ranges: %d before, %d after", before, userRanges())
}
