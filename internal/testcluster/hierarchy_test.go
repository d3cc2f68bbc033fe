package testcluster_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/hierarchy"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
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

// TestHierarchyLeafRecovers: a leaf that voted for its part of a
// distributed transaction and then died gets the part back from its part
// record when it restarts, and votes again (issue 9, item 6). The test is
// the transaction's client, by hand: it sends one node's part and holds
// back the other's, so that nothing can decide the transaction; it stops
// and restarts the node holding the part; then it sends the held part.
// Two cases: the stopped node is n1 (the root's host, and the answering
// node, the lowest of the transaction), or the other node (its parent
// stays up, with the watermarks the leaf promised it). Whether the
// transaction commits depends on time (the decider aborts a transaction
// older than HierarchyTxnAgeMax); what must hold either way: the record
// is there while the part is pending, the restarted leaf reads it back
// (pending again, or aborted as too old), a recovered transaction that
// aborts did so only for its age, the keys show the outcome the status
// table holds, and no record is left.
func TestHierarchyLeafRecovers(t *testing.T) {
	for _, variant := range hierarchyVariants {
		for _, stopRoot := range []bool{true, false} {
			name := variant + "/stop-other"
			if stopRoot {
				name = variant + "/stop-root-host"
			}
			t.Run(name, func(t *testing.T) { testHierarchyLeafRecovers(t, variant, stopRoot) })
		}
	}
}

func testHierarchyLeafRecovers(t *testing.T, variant string, stopRoot bool) {
	c := startCluster(t, testcluster.Options{Nodes: 3, InitialRanges: 4, CommitProtocol: "hierarchy-" + variant})
	db := openDB(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), setupDeadline)
	defer cancel()
	// One key in a range n1 leads, one in a range another node
	// leads.
	var a, b []byte
	bNode := -1
	for a == nil || b == nil {
		a, b = nil, nil
		for _, k := range []string{"0key", "4key", "8key", "akey", "fkey", "kkey", "pkey", "ukey", "zkey"} {
			_, nd, err := busiestRange(ctx, db, c, [][]byte{[]byte(k)})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case nd == 0 && a == nil:
				a = []byte(k)
			case nd != 0 && b == nil:
				b, bNode = []byte(k), nd
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("no two ranges led by n1 and another node")
		}
		if a == nil || b == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("%s led by n1, %s led by n%d", a, b, bNode+1)
	// The cluster takes hierarchy parts once every led range's
	// lease fence passed.
	for !c.Node(0).HierarchyReady() || !c.Node(bNode).HierarchyReady() {
		if ctx.Err() != nil {
			t.Fatal("the validators never became ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
	startTs, err := db.Timestamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nodes := []uint64{c.Node(0).NodeID(), c.Node(bNode).NodeID()}
	slices.Sort(nodes)
	part := func(k []byte) *rpcpb.HierCommitRequest {
		return &rpcpb.HierCommitRequest{StartTs: startTs, Nodes: nodes,
			Writes: []*rpcpb.HierWrite{{Key: keys.UserKey(k), Value: []byte("recovered")}}}
	}
	hierClient := func(i int) rpcpb.HierarchyClient {
		conn, err := grpc.NewClient(c.Addrs()[i], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return rpcpb.NewHierarchyClient(conn)
	}
	// stop holds the pending part; held's part is sent after the restart.
	stop, held := 0, bNode
	if !stopRoot {
		stop, held = bNode, 0
	}
	keyOf := map[int][]byte{0: a, bNode: b}
	// n1 answers the client, so its Commit waits for the decision (and
	// ends with n1's stop if n1 is stopped).
	go func() { _, _ = hierClient(stop).Commit(ctx, part(keyOf[stop])) }()
	leafPending := func(i int) int {
		for _, v := range c.Node(i).HierarchyStatus().Validators {
			if v.Leaf {
				return v.Pending
			}
		}
		return 0
	}
	for leafPending(stop) == 0 {
		if ctx.Err() != nil {
			t.Fatalf("n%d's leaf never held the part", stop+1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The record is written off the leaf's loop, after the vote.
	for partRecords(t, c, stop) != 1 {
		if ctx.Err() != nil {
			t.Fatalf("n%d holds %d part records while its part is pending, want 1", stop+1, partRecords(t, c, stop))
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.StopNode(stop)
	if err := c.RestartNode(stop); err != nil {
		t.Fatal(err)
	}
	var st kvserver.HierarchyStatus
	for {
		st = c.Node(stop).HierarchyStatus()
		if st.Validators != nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("n%d's validators never started again", stop+1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("n%d restarted: %d parts recovered pending, %d records ended (decided or too old)", stop+1, st.Recovered, st.RecoveredEnded)
	if st.Recovered+st.RecoveredEnded != 1 {
		t.Fatalf("the restarted leaf read back %d records (%d pending, %d ended), want 1", st.Recovered+st.RecoveredEnded, st.Recovered, st.RecoveredEnded)
	}
	// A recovered part is voted for again by the new leaf at once (its
	// first vote message), before the held part exists anywhere.
	for st.Recovered == 1 {
		votes := 0
		for _, v := range c.Node(stop).HierarchyStatus().Validators {
			if v.Leaf {
				votes += v.Counts.VoteMessages
			}
		}
		if votes > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the restarted leaf never voted for its recovered part")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp, err := hierClient(held).Commit(ctx, part(keyOf[held])); err != nil || resp.GetError() != nil {
		t.Fatalf("n%d's part: %v %v", held+1, err, resp.GetError())
	}
	var commitTs uint64
	for {
		decided, err := db.LookupTxns(ctx, []uint64{startTs})
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := decided[startTs]; ok {
			commitTs = c
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the transaction was never decided")
		}
		time.Sleep(20 * time.Millisecond)
	}
	aged := int64(0)
	for i := range c.Addrs() {
		aged += c.Node(i).HierarchyStatus().AgedAborts
	}
	t.Logf("transaction %d: commit_ts %d (0: aborted); %d aborted as too old", startTs, commitTs, aged)
	if st.Recovered == 1 && commitTs == 0 && aged == 0 {
		t.Errorf("the recovered transaction aborted, and not for its age: every vote was OK")
	}
	for _, k := range [][]byte{a, b} {
		v, ok, err := db.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ok && string(v) == "recovered", commitTs != 0; got != want {
			t.Errorf("%s = %q (found %v), transaction committed %v", k, v, ok, want)
		}
	}
	// The decision reaches the restarted leaf, which resolves the part
	// and forgets its record.
	for partRecords(t, c, stop) != 0 || leafPending(stop) != 0 {
		if ctx.Err() != nil {
			t.Fatalf("n%d still holds %d part records and %d pending parts", stop+1, partRecords(t, c, stop), leafPending(stop))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// partRecords counts node i's hierarchy part records.
func partRecords(t *testing.T, c *testcluster.Cluster, i int) int {
	t.Helper()
	lo := storage.NodeLocalKey("hier-part/")
	hi := storage.NodeLocalKey("hier-part0")
	it, err := c.Node(i).Engine().NewIter(lo, hi)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return n
}
