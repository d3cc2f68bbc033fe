package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/testcluster/check"
)

// A seeded random list-append workload over the fake cluster, with commit
// answers lost at random (the commit point applied, the answer AMBIGUOUS),
// checked serializable by the Elle-style checker. Under snapshot isolation
// only write skew (G2 with two rw edges) may appear. With pipelining on,
// one pipelined write in eight also fails to replicate (answered, never
// applied): the proofs must make those transactions retry.
func TestListAppendHistory(t *testing.T) {
	for _, iso := range []Isolation{Serializable, SnapshotIsolation} {
		for _, pipelining := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/pipelining=%v", iso, pipelining), func(t *testing.T) {
				seed := uint64(time.Now().UnixNano())
				t.Logf("seed %d", seed)
				runListAppend(t, iso, pipelining, seed)
			})
		}
	}
}

func runListAppend(t *testing.T, iso Isolation, pipelining bool, seed uint64) {
	c := newFakeCluster(t, 3)
	db := c.open(func(o *Options) {
		o.SendAttemptsMax = 2 // so that lost answers also reach the status lookup
		o.IntentWaitMax = 20 * time.Millisecond
		o.Pipelining = ToggleOff
		if pipelining {
			o.Pipelining = ToggleOn
		}
	})
	var hookMu sync.Mutex
	hookRand := rand.New(rand.NewPCG(seed, 1))
	if pipelining {
		// Called with the fake's lock held; hookMu is taken only here
		// and in the batch hook, which runs without it.
		c.setDropAsync(func([]byte) bool {
			hookMu.Lock()
			defer hookMu.Unlock()
			return hookRand.IntN(8) == 0
		})
	}
	c.setAfterBatch(func(node uint64, req *rpcpb.BatchRequest, resp *rpcpb.BatchResponse) *rpcpb.BatchResponse {
		if !isCommitPUE(req) {
			return nil
		}
		hookMu.Lock()
		lose := hookRand.IntN(3) == 0
		hookMu.Unlock()
		if lose {
			return errResp(rpcpb.ErrorCode_AMBIGUOUS, "answer lost")
		}
		return nil
	})

	const workers, txnsPerWorker, keyCount = 6, 25, 4
	var (
		recMu   sync.Mutex
		records []check.TxnRecord
		nextVal atomic.Int64
		nextID  atomic.Int64
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)+2))
			for range txnsPerWorker {
				rec := runOneListTxn(db, r, iso, keyCount, &nextVal)
				rec.ID = int(nextID.Add(1))
				recMu.Lock()
				records = append(records, rec)
				recMu.Unlock()
			}
		}()
	}
	wg.Wait()
	committed := 0
	for _, r := range records {
		if r.Committed {
			committed++
		}
	}
	ok, anomalies := check.CheckListAppend(records)
	st := db.Stats()
	t.Logf("%d transactions, %d committed; stats %+v", len(records), committed, st)
	if committed == 0 {
		t.Fatal("nothing committed")
	}
	if pipelining && st.PipelinedWrites == 0 {
		t.Fatal("pipelining on, but no write was pipelined")
	}
	if iso == SnapshotIsolation {
		var bad []string
		for _, a := range anomalies {
			if !strings.HasPrefix(a, "G2:") {
				bad = append(bad, a)
			}
		}
		ok, anomalies = len(bad) == 0, bad
	}
	if !ok {
		t.Fatalf("seed %d: anomalies:\n%s", seed, strings.Join(anomalies, "\n"))
	}
}

// runOneListTxn runs one attempt of a random transaction and records it.
func runOneListTxn(db *DB, r *rand.Rand, iso Isolation, keyCount int, nextVal *atomic.Int64) check.TxnRecord {
	ctx := context.Background()
	var rec check.TxnRecord
	txn, err := db.Begin(ctx, WithIsolation(iso))
	if err != nil {
		return rec
	}
	rec.StartTs = txn.StartTs()
	fail := func() check.TxnRecord { _ = txn.Rollback(ctx); return rec }
	for range 1 + r.IntN(4) {
		key := fmt.Sprintf("k%d", r.IntN(keyCount))
		v, _, err := txn.Get(ctx, []byte(key))
		if err != nil {
			return fail()
		}
		list := parseList(v)
		if r.IntN(2) == 0 {
			rec.Ops = append(rec.Ops, check.MicroOp{Kind: check.OpRead, Key: key, List: list})
			continue
		}
		val := int(nextVal.Add(1))
		// The read above is how the append is implemented, not an
		// observation the history records.
		if err := txn.Put(ctx, []byte(key), appendList(v, val)); err != nil {
			rec.Ops = append(rec.Ops, check.MicroOp{Kind: check.OpAppend, Key: key, Value: val})
			return fail()
		}
		rec.Ops = append(rec.Ops, check.MicroOp{Kind: check.OpAppend, Key: key, Value: val})
	}
	err = txn.Commit(ctx)
	switch {
	case err == nil:
		rec.Committed = true
	case errors.Is(err, ErrAmbiguous):
		rec.Ambiguous = true
	}
	return rec
}

func parseList(v []byte) []int {
	var out []int
	for _, f := range strings.Split(string(v), ",") {
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			panic(err)
		}
		out = append(out, n)
	}
	return out
}

func appendList(v []byte, x int) []byte {
	if len(v) == 0 {
		return []byte(strconv.Itoa(x))
	}
	return fmt.Appendf(append([]byte(nil), v...), ",%d", x)
}
