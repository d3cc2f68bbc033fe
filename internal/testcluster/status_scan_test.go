package testcluster_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestScanTxns runs committed, rolled-back and still-open transactions on
// a real cluster, for each status encoding, and checks DB.ScanTxns
// (PlainScan over the status ranges, planned by txnstatus.ScanSpans)
// against point lookups (DB.TxnStatus) of every transaction: a narrow
// interval (tickets: exact row spans) returns exactly the transactions in
// it, the whole timestamp space (tickets: the whole table, filtered)
// returns them all; an open transaction has no record. The cluster
// bootstrapped without an encoding ("default") uses tickets-mix.
func TestScanTxns(t *testing.T) {
	for _, enc := range []string{"", "tickets", "v1"} {
		name := enc
		if enc == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) {
			c := startCluster(t, testcluster.Options{Nodes: 3, StatusEncoding: enc})
			db := openDB(t, c)
			want := enc
			if enc == "" {
				want = "tickets-mix"
			}
			if got := db.Settings().GetStatusEncoding(); got != want {
				t.Fatalf("cluster bootstrapped with status encoding %q has %q, want %q", enc, got, want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), setupDeadline)
			defer cancel()
			// 1PC and parallel commits off: every decision is a status
			// record (a 1PC transaction has none).
			opts := []client.TxnOption{client.WithOnePC(false), client.WithParallelCommits(false)}
			const n = 24
			var starts []uint64
			committed := map[uint64]bool{}
			for i := range n {
				txn, err := db.Begin(ctx, opts...)
				if err != nil {
					t.Fatal(err)
				}
				if err := txn.Put(ctx, []byte(fmt.Sprintf("scan/%d", i)), []byte("v")); err != nil {
					t.Fatal(err)
				}
				if i%3 == 0 {
					err = txn.Rollback(ctx)
				} else {
					err = txn.Commit(ctx)
					committed[txn.StartTs()] = true
				}
				if err != nil {
					t.Fatal(err)
				}
				starts = append(starts, txn.StartTs())
			}
			open, err := db.Begin(ctx, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer open.Rollback(ctx)
			if err := open.Put(ctx, []byte("scan/open"), []byte("v")); err != nil {
				t.Fatal(err)
			}

			scan := func(from, to uint64) map[uint64]client.TxnRecord {
				out := map[uint64]client.TxnRecord{}
				if err := db.ScanTxns(ctx, from, to, func(r client.TxnRecord) error {
					if _, dup := out[r.StartTs]; dup {
						return fmt.Errorf("start_ts %d listed twice", r.StartTs)
					}
					out[r.StartTs] = r
					return nil
				}); err != nil {
					t.Fatalf("ScanTxns [%d, %d): %v", from, to, err)
				}
				return out
			}
			check := func(what string, got map[uint64]client.TxnRecord, want []uint64) {
				t.Helper()
				if len(got) != len(want) {
					t.Errorf("%s: %d transactions, want %d", what, len(got), len(want))
				}
				for _, s := range want {
					r, ok := got[s]
					if !ok {
						t.Errorf("%s: start_ts %d missing", what, s)
						continue
					}
					st, err := db.TxnStatus(ctx, s)
					if err != nil {
						t.Fatal(err)
					}
					if r.TxnStatus != st || !r.Decided || r.Aborted == committed[s] {
						t.Errorf("%s: start_ts %d scanned as %+v, point lookup %+v, committed %v", what, s, r, st, committed[s])
					}
				}
			}
			check("narrow", scan(starts[5], starts[17]), starts[5:17])
			all := scan(0, math.MaxUint64)
			if _, ok := all[open.StartTs()]; ok {
				t.Errorf("the open transaction %d is listed", open.StartTs())
			}
			check("all", all, starts)
			if err := db.ScanTxns(ctx, 9, 9, func(client.TxnRecord) error { return nil }); err == nil {
				t.Errorf("empty interval accepted")
			}
		})
	}
}
