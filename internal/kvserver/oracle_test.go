package kvserver_test

import (
	"context"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestOracleIncreasesAcrossFailover: timestamps taken one after another
// strictly increase while the oracle's node (range 1's leader) is stopped
// and restarted (I4).
func TestOracleIncreasesAcrossFailover(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir()})
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
	var prev uint64
	stopped := -1
	for i := 0; i < 600; i++ {
		switch i {
		case 200:
			stopped = c.LeaderOf(kvserver.OracleRangeID)
			if stopped < 0 {
				t.Fatal("range 1 has no leader")
			}
			c.StopNode(stopped)
		case 400:
			if err := c.RestartNode(stopped); err != nil {
				t.Fatal(err)
			}
		}
		var ts uint64
		deadline := time.Now().Add(60 * time.Second)
		for {
			tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ts, err = db.Timestamp(tctx)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no timestamp for a minute: %v", err)
			}
		}
		if ts <= prev {
			t.Fatalf("timestamp %d after %d (request %d): not strictly increasing", ts, prev, i)
		}
		prev = ts
	}
}
