package client

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// waitFor spins until cond holds. It decides nothing by time: a test that
// never reaches cond hangs and is killed by the test timeout.
func waitFor(cond func() bool) {
	for !cond() {
		runtime.Gosched()
	}
}

// While one Timestamps RPC is in flight, later callers wait and are served
// together by the next RPC, which asks for exactly as many timestamps.
func TestOracleBatchesWaitingCallers(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	release := c.gateTimestamps()
	const n = 10
	got := make([]uint64, n)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ts, err := db.Timestamp(context.Background())
		if err != nil {
			t.Error(err)
		}
		got[0] = ts
	}()
	<-c.tsEntered // the first RPC is in flight, blocked
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts, err := db.Timestamp(context.Background())
			if err != nil {
				t.Error(err)
			}
			got[i] = ts
		}()
	}
	waitFor(func() bool { return db.oracle.waitingCount() == n-1 })
	release()
	wg.Wait()
	if counts := c.tsCounts(); !slices.Equal(counts, []uint32{1, n - 1}) {
		t.Fatalf("RPC counts = %v, want [1 %d]", counts, n-1)
	}
	slices.Sort(got)
	for i := 1; i < n; i++ {
		if got[i] == got[i-1] {
			t.Fatalf("duplicate timestamp %d", got[i])
		}
	}
	if st := db.Stats(); st.TimestampRPCs != 2 {
		t.Fatalf("TimestampRPCs = %d", st.TimestampRPCs)
	}
}

// TimestampBatchMax caps one RPC's count.
func TestOracleBatchMax(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(func(o *Options) { o.TimestampBatchMax = 4 })
	release := c.gateTimestamps()
	var wg sync.WaitGroup
	call := func() {
		defer wg.Done()
		if _, err := db.Timestamp(context.Background()); err != nil {
			t.Error(err)
		}
	}
	wg.Add(1)
	go call()
	<-c.tsEntered
	for range 9 {
		wg.Add(1)
		go call()
	}
	waitFor(func() bool { return db.oracle.waitingCount() == 9 })
	release()
	wg.Wait()
	if counts := c.tsCounts(); !slices.Equal(counts, []uint32{1, 4, 4, 1}) {
		t.Fatalf("RPC counts = %v, want [1 4 4 1]", counts)
	}
}

// The oracle RPC follows the lease of range 1.
func TestOracleFollowsLeaseholder(t *testing.T) {
	c := newFakeCluster(t, 3)
	db := c.open()
	a, err := db.Timestamp(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c.setLeaseholder(1, 2)
	b, err := db.Timestamp(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if b <= a {
		t.Fatalf("timestamps %d then %d", a, b)
	}
	if c.errCount(rpcpb.ErrorCode_NOT_LEASEHOLDER) != 1 {
		t.Fatalf("NOT_LEASEHOLDER = %d", c.errCount(rpcpb.ErrorCode_NOT_LEASEHOLDER))
	}
}
