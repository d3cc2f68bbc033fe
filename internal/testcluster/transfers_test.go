package testcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/bench/kvbench"
	"github.com/canopy-db/canopy/internal/bench/txnbench"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestBenchTransfers runs canopy bench txn's transfers on a real cluster,
// with the writes handed to the commit (Txn.CommitWith: one-phase commits
// where both keys share a range, both writes at once elsewhere) and as two
// Txn.Puts: every transfer commits or fails whole, so the total balance
// never changes, and some transfers do commit. Bounded by operations, not
// judged by time.
func TestBenchTransfers(t *testing.T) {
	ctx := context.Background()
	c := startCluster(t, testcluster.Options{Nodes: 3, InitialRanges: 4})
	db := openDB(t, c)
	o := kvbench.Options{Keys: 64, ValueBytes: 32, Duration: time.Minute, OpsMax: 150, LoadConcurrency: 8}
	if err := txnbench.Load(ctx, db, o); err != nil {
		t.Fatal(err)
	}
	for _, atCommit := range []bool{true, false} {
		res, err := txnbench.Run(ctx, txnbench.Canopy{DB: db, WritesAtCommit: atCommit}, o, 8)
		if err != nil {
			t.Fatalf("writes at commit %v: %v", atCommit, err)
		}
		if res.Ops == 0 {
			t.Fatalf("writes at commit %v: no transfer committed (%d errors, first: %s)", atCommit, res.Errors, res.FirstError)
		}
		if _, err := txnbench.Check(ctx, db, o); err != nil {
			t.Fatalf("writes at commit %v, after %d transfers: %v", atCommit, res.Ops, err)
		}
	}
	if n := db.Stats().OnePCCommits; n == 0 {
		t.Fatal("no transfer with its writes at commit committed in one phase, though 4 ranges hold 64 keys")
	}
}
