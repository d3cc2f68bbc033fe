package testcluster_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/hierarchy"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/canopy-db/canopy/internal/testcluster/check"
)

// The hierarchy protocols (issue 9) checked like the default one: the bank
// invariants and list-append serializability, on three in-process nodes
// running the validators (one leaf per node under one root), with the
// leaseholder of the busiest range stopped and restarted midway.

var hierarchyVariants = []string{"locking", "timestamps"}

// hierarchyCounts sums the validators' counts over the running nodes (a
// node's counts start again when it restarts).
func hierarchyCounts(c *testcluster.Cluster) (parts, rootDecided, rootCommitted int, st kvserver.HierarchyStatus) {
	for i := range c.Addrs() {
		n := c.Node(i)
		if n == nil {
			continue
		}
		s := n.HierarchyStatus()
		for _, v := range s.Validators {
			if v.Leaf {
				parts += v.Counts.Parts
			} else {
				rootDecided += v.Counts.Decided
				rootCommitted += v.Counts.Committed
			}
		}
		st.Dropped, st.Overridden, st.AgedAborts = st.Dropped+s.Dropped, st.Overridden+s.Overridden, st.AgedAborts+s.AgedAborts
	}
	return parts, rootDecided, rootCommitted, st
}

// checkHierarchyRan fails the test unless the leaves took parts.
func checkHierarchyRan(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	parts, rootDecided, rootCommitted, st := hierarchyCounts(c)
	t.Logf("hierarchy: %d parts taken by leaves, %d distributed transactions decided by the root (%d committed), since each node's last start; %d messages dropped, %d decisions overridden by the status table, %d aborted as too old",
		parts, rootDecided, rootCommitted, st.Dropped, st.Overridden, st.AgedAborts)
	if parts == 0 {
		t.Errorf("the leaves took no part")
	}
}

// TestHierarchyDistributed commits transactions that read and write keys
// of two ranges led by different nodes: each is decided by the root, and
// a later transaction reads its writes.
func TestHierarchyDistributed(t *testing.T) {
	for _, variant := range hierarchyVariants {
		t.Run(variant, func(t *testing.T) {
			c := startCluster(t, testcluster.Options{Nodes: 3, InitialRanges: 4, CommitProtocol: "hierarchy-" + variant})
			db := openDB(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), setupDeadline)
			defer cancel()
			// "0..." and "a..." lie in the first two user ranges, whose
			// preferred leaders differ; wait until they are led apart.
			a, b := []byte("0key"), []byte("akey")
			for {
				ra, na, err := busiestRange(ctx, db, c, [][]byte{a})
				if err != nil {
					t.Fatal(err)
				}
				rb, nb, err := busiestRange(ctx, db, c, [][]byte{b})
				if err != nil {
					t.Fatal(err)
				}
				if ra != rb && na != nb {
					t.Logf("%s in r%d led by n%d, %s in r%d led by n%d", a, ra, na+1, b, rb, nb+1)
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("ranges r%d and r%d never led by different nodes", ra, rb)
				}
				time.Sleep(100 * time.Millisecond)
			}
			const txns = 10
			for i := 1; i <= txns; i++ {
				err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
					if _, _, err := txn.Get(ctx, a); err != nil {
						return err
					}
					if _, _, err := txn.Get(ctx, b); err != nil {
						return err
					}
					v := []byte(strconv.Itoa(i))
					if err := txn.Put(ctx, a, v); err != nil {
						return err
					}
					return txn.Put(ctx, b, v)
				})
				if err != nil {
					t.Fatalf("txn %d: %v", i, err)
				}
			}
			err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
				for _, k := range [][]byte{a, b} {
					v, ok, err := txn.Get(ctx, k)
					if err != nil {
						return err
					}
					if want := strconv.Itoa(txns); !ok || string(v) != want {
						t.Errorf("%s = %q (found %v), want %q", k, v, ok, want)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			parts, rootDecided, rootCommitted, _ := hierarchyCounts(c)
			t.Logf("%d parts, %d decided by the root, %d committed", parts, rootDecided, rootCommitted)
			if rootCommitted < txns {
				t.Errorf("the root committed %d transactions, want at least %d", rootCommitted, txns)
			}
			// After the validators sat idle longer than twice ResendAfter,
			// a new transaction's parts and votes are not taken for
			// overdue: no vote resent, no transaction forgotten. (The
			// loops used to feed an input to the core before telling it
			// the time, so the core stamped the new part and the root's
			// new entry with the time of its last tick, before the idle
			// stretch.)
			resent, forgotten := hierarchyRecoveries(c)
			time.Sleep(2*hierarchy.DefaultResendAfter + 500*time.Millisecond)
			err = db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
				if err := txn.Put(ctx, a, []byte("after idle")); err != nil {
					return err
				}
				return txn.Put(ctx, b, []byte("after idle"))
			})
			if err != nil {
				t.Fatal(err)
			}
			if r, f := hierarchyRecoveries(c); r != resent || f != forgotten {
				t.Errorf("a transaction after an idle stretch: %d votes resent and %d transactions forgotten, want none", r-resent, f-forgotten)
			}
		})
	}
}

// hierarchyRecoveries sums the validators' resent votes and forgotten
// transactions over the cluster's nodes.
func hierarchyRecoveries(c *testcluster.Cluster) (resent, forgotten int) {
	for i := range c.Addrs() {
		if n := c.Node(i); n != nil {
			for _, v := range n.HierarchyStatus().Validators {
				resent += v.Counts.Resent
				forgotten += v.Counts.Forgotten
			}
		}
	}
	return resent, forgotten
}

// TestHierarchyBank runs bank transfers (most of them across nodes) on a
// cluster running each hierarchy protocol, with the leaseholder of the
// accounts' busiest range stopped after a third of the transfers and
// restarted after two thirds: the total holds, no acknowledged transfer is
// lost, no transfer reported as not committed is there, every balance
// replays from the receipts, and replicas agree (I5).
func TestHierarchyBank(t *testing.T) {
	for _, variant := range hierarchyVariants {
		t.Run(variant, func(t *testing.T) {
			seed := testSeed(t)
			accounts, transfers, workers := 100, 240, 4
			c := startCluster(t, testcluster.Options{Nodes: 3, InitialRanges: 4, CommitProtocol: "hierarchy-" + variant})
			admin := openDB(t, c)
			b := newBankWorkload(accounts)
			b.setup(t, admin)
			dbs := make([]*client.DB, workers)
			for i := range dbs {
				dbs[i] = openWorkloadDB(t, c)
			}
			n := startNemesis(t, transfers, killFault(c, leaseholderPicker(t, admin, c, b.keys)))
			b.run(t, dbs, seed, transfers, n)
			n.finish()
			b.verify(t, admin)
			if b.committed.Load() == 0 {
				t.Errorf("no transfer committed")
			}
			checkHierarchyRan(t, c)
			for _, db := range dbs {
				_ = db.Close()
			}
			_ = admin.Close()
			checkReplicas(t, c)
		})
	}
}

// TestHierarchyListAppend checks I3 for each hierarchy protocol:
// list-append histories (reads by Get: a hierarchy transaction that writes
// may not scan) under the list-append nemesis (the leaseholder of a busy
// range stopped and restarted, a status-table leader partitioned, a split)
// have no anomaly at all (check.CheckListAppend).
func TestHierarchyListAppend(t *testing.T) {
	for _, variant := range hierarchyVariants {
		t.Run(variant, func(t *testing.T) {
			seed := testSeed(t)
			txns := runListAppendWith(t, seed, listAppendConfig{protocol: "hierarchy-" + variant, noScans: true, workers: 4, txnsPerWorker: 30})
			ok, anomalies := check.CheckListAppend(txns)
			if !ok {
				t.Fatalf("hierarchy-%s list-append history has anomalies:\n%s", variant, strings.Join(anomalies, "\n"))
			}
		})
	}
}
