package testcluster_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/canopy-db/canopy/internal/testcluster/check"
)

// TestLinearizableSingleKeyOps checks that DB.Get, DB.Put and DB.Delete
// outside transactions are linearizable (client package documentation,
// item 6) while the leaseholder of their range is stopped and restarted:
// several clients, each with its own DB, operate on a handful of keys with
// values unique per write; the history, on one monotonic clock, goes to
// porcupine (check.CheckLinearizable).
//
// Outcomes: a put or delete that returned nil is OK; one that failed with
// ErrInvalidArgument did not happen (Failed; none is expected); any other
// error may hide an applied write (Unknown). A get that failed returned
// nothing and is recorded as Failed, which the checker drops.
func TestLinearizableSingleKeyOps(t *testing.T) {
	runLinearizable(t, false, killFault)
}

// TestLinearizablePartition is TestLinearizableSingleKeyOps with the
// keys' leaseholder partitioned (every Raft link dropped both ways, client
// connections intact) instead of stopped: a leader cut off from its
// followers must not answer a Get from its stale state or acknowledge a
// Put it cannot replicate.
func TestLinearizablePartition(t *testing.T) {
	runLinearizable(t, false, partitionFault)
}

// TestLinearizableWithTransactions mixes, on the same keys, the
// single-key operations with one-key transactions (DB.Txn doing one Get,
// Put or Delete), with the keys' leaseholder stopped and restarted. Since
// transactions are strictly serializable (start_ts and commit_ts come from
// the oracle after the call begins), the mixed history must still be
// linearizable, also across a split of the keys' range later in the run: it checks, for instance, that a Get meeting the intent of
// a transaction whose commit is in flight waits for the decision, and that
// a committed transaction's write is visible to every read that begins
// after the commit is acknowledged, before its intents are resolved.
//
// A transactional write is OK when DB.Txn returned nil, Failed when it
// definitely did not commit, Unknown when ambiguous
// (testcluster.TxnOutcome); a transactional read that failed is dropped.
func TestLinearizableWithTransactions(t *testing.T) {
	runLinearizable(t, true, killFault)
}

// runLinearizable runs the single-key workload (with one-key transactions
// for half of the operations if withTxns) under the fault makeFault builds
// around the keys' leaseholder, and checks the history with porcupine.
func runLinearizable(t *testing.T, withTxns bool, makeFault func(*testcluster.Cluster, func() int) fault) {
	seed := testSeed(t)
	clients, opsPerClient := 8, 150
	if testing.Short() {
		clients, opsPerClient = 4, 60
	}
	const keyCount = 4
	c := startCluster(t, testcluster.Options{Nodes: 3})
	admin := openDB(t, c)
	ks := make([][]byte, keyCount)
	for i := range ks {
		ks[i] = []byte(fmt.Sprintf("lin/%d", i))
	}
	dbs := make([]*client.DB, clients)
	for i := range dbs {
		dbs[i] = openWorkloadDB(t, c)
	}
	total := clients * opsPerClient
	faults := []fault{makeFault(c, leaseholderPicker(t, admin, c, ks))}
	if withTxns {
		// Then split the keys' range between them.
		faults = append(faults, splitFault(t, admin, []byte("lin/2")))
	}
	n := startNemesis(t, total, faults...)
	h := testcluster.NewHistory()
	var okOps atomic.Int64
	stop := make(chan struct{})
	go watchProgress(t, "single-key operations", okOps.Load, stop)
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	start := time.Now()
	for ci := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(ci)))
			db := dbs[ci]
			for seq := 0; seq < opsPerClient; seq++ {
				k := ks[rng.IntN(keyCount)]
				op := check.KVOp{ClientID: ci, Key: string(k)}
				ctx, cancel := context.WithTimeout(context.Background(), opDeadline)
				var err error
				p := rng.IntN(10)
				if withTxns && rng.IntN(2) == 0 {
					err = txnOp(ctx, db, h, &op, k, p, seq)
					p = -1
				}
				switch {
				case p < 0:
				case p < 5:
					op.Kind = check.OpGet
					op.Call = h.Now()
					var v []byte
					v, op.Found, err = db.Get(ctx, k)
					op.Return = h.Now()
					op.Value = string(v)
					if err != nil {
						// A failed read returned nothing: drop it.
						op.Outcome = check.Failed
					} else {
						op.Outcome = check.OK
					}
				case p < 9:
					op.Kind = check.OpPut
					op.Value = fmt.Sprintf("c%d-%d", ci, seq)
					op.Call = h.Now()
					err = db.Put(ctx, k, []byte(op.Value))
					op.Return = h.Now()
					op.Outcome = testcluster.KVWriteOutcome(err)
				default:
					op.Kind = check.OpDel
					op.Call = h.Now()
					err = db.Delete(ctx, k)
					op.Return = h.Now()
					op.Outcome = testcluster.KVWriteOutcome(err)
				}
				cancel()
				h.AddKV(op)
				mu.Lock()
				outcomes[op.Kind+" "+op.Outcome.String()]++
				if err != nil {
					outcomes["error: "+errClass(err)]++
				}
				mu.Unlock()
				if err == nil {
					okOps.Add(1)
				}
				if errors.Is(err, client.ErrInvalidArgument) {
					t.Errorf("client %d: %s %q: unexpected %v", ci, op.Kind, k, err)
				}
				n.done()
			}
		}()
	}
	wg.Wait()
	close(stop)
	n.finish()
	ops := h.KV()
	t.Logf("%d operations in %v: %v", len(ops), time.Since(start).Round(time.Millisecond), outcomes)
	checkStart := time.Now()
	// Outside t.TempDir, which is removed when the test ends: the
	// visualization is written only when the check fails, to be read then.
	vis := filepath.Join(os.TempDir(), fmt.Sprintf("canopy-linearizability-%d.html", seed))
	ok, info, err := check.CheckLinearizableWithOptions(ops, check.LinearizableOptions{
		Timeout:           2 * time.Minute,
		VisualizationPath: vis,
	})
	if err != nil {
		t.Fatalf("no verdict from the linearizability checker: %v", err)
	}
	if !ok {
		t.Fatalf("single-key history is not linearizable: %s (visualization: %s)", info, vis)
	}
	t.Logf("linearizable (%s), checked in %v", info, time.Since(checkStart).Round(time.Millisecond))
}

// txnOp runs one operation of the linearizability workload as a one-key
// transaction: a Get if p < 5, a Put if p < 9, else a Delete. It fills op
// and returns DB.Txn's error.
func txnOp(ctx context.Context, db *client.DB, h *testcluster.History, op *check.KVOp, k []byte, p, seq int) error {
	var found bool
	var v []byte
	fn := func(ctx context.Context, txn *client.Txn) error {
		var err error
		switch {
		case p < 5:
			v, found, err = txn.Get(ctx, k)
		case p < 9:
			err = txn.Put(ctx, k, []byte(op.Value))
		default:
			err = txn.Delete(ctx, k)
		}
		return err
	}
	switch {
	case p < 5:
		op.Kind = check.OpGet
	case p < 9:
		op.Kind = check.OpPut
		op.Value = fmt.Sprintf("c%d-%d-txn", op.ClientID, seq)
	default:
		op.Kind = check.OpDel
	}
	op.Call = h.Now()
	err := db.Txn(ctx, fn)
	op.Return = h.Now()
	if op.Kind == check.OpGet {
		op.Value, op.Found = string(v), found
		op.Outcome = check.OK
		if err != nil {
			// A failed read returned nothing: drop it.
			op.Outcome = check.Failed
		}
		return err
	}
	switch committed, ambiguous := testcluster.TxnOutcome(err); {
	case committed:
		op.Outcome = check.OK
	case ambiguous:
		op.Outcome = check.Unknown
	default:
		op.Outcome = check.Failed
	}
	return err
}
