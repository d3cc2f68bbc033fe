package testcluster_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// tsOp is one DB.Timestamp call: its interval on the history clock and the
// timestamp it returned.
type tsOp struct {
	client        int
	call, return_ int64
	ts            uint64
}

// checkTimestamps checks invariant I4 on a history of oracle calls: every
// timestamp is handed out once, and a call that began after another
// returned got a larger timestamp (real-time order, across clients and
// across the oracle's leader changes). It returns the violations, at most
// ten.
func checkTimestamps(ops []tsOp) []string {
	var out []string
	seen := map[uint64]tsOp{}
	for _, op := range ops {
		if prev, dup := seen[op.ts]; dup && len(out) < 10 {
			out = append(out, fmt.Sprintf("timestamp %d handed out twice (clients %d and %d)", op.ts, prev.client, op.client))
		}
		seen[op.ts] = op
	}
	// byReturn[i] with prefix maxima: the largest timestamp among calls
	// that returned no later than byReturn[i].return_.
	byReturn := append([]tsOp(nil), ops...)
	sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].return_ < byReturn[j].return_ })
	prefixMax := make([]tsOp, len(byReturn))
	for i, op := range byReturn {
		prefixMax[i] = op
		if i > 0 && prefixMax[i-1].ts > op.ts {
			prefixMax[i] = prefixMax[i-1]
		}
	}
	for _, op := range ops {
		// Calls that returned strictly before op was called.
		n := sort.Search(len(byReturn), func(i int) bool { return byReturn[i].return_ >= op.call })
		if n == 0 {
			continue
		}
		if before := prefixMax[n-1]; before.ts >= op.ts && len(out) < 10 {
			out = append(out, fmt.Sprintf("client %d got %d at [%d, %d] ns, but client %d had already got %d at [%d, %d] ns",
				op.client, op.ts, op.call, op.return_, before.client, before.ts, before.call, before.return_))
		}
	}
	return out
}

func TestCheckTimestamps(t *testing.T) {
	good := []tsOp{{0, 0, 10, 5}, {1, 5, 20, 3}, {0, 11, 30, 6}, {1, 21, 40, 7}}
	if v := checkTimestamps(good); len(v) != 0 {
		t.Errorf("good history: %v", v)
	}
	stale := []tsOp{{0, 0, 10, 5}, {1, 11, 20, 4}}
	if v := checkTimestamps(stale); len(v) != 1 {
		t.Errorf("stale timestamp after a returned call: got %v, want one violation", v)
	}
	dup := []tsOp{{0, 0, 10, 5}, {1, 0, 10, 5}}
	if v := checkTimestamps(dup); len(v) != 1 {
		t.Errorf("duplicate timestamp: got %v, want one violation", v)
	}
}

// TestOracleMonotonicAcrossFailover checks invariant I4 while the leader
// of range 1 (the timestamp oracle) is stopped and restarted, then
// partitioned and healed: clients call DB.Timestamp concurrently and the
// history must be strictly increasing in real-time order.
func TestOracleMonotonicAcrossFailover(t *testing.T) {
	callsPerClient := 400
	if testing.Short() {
		callsPerClient = 150
	}
	const clients = 4
	c := startCluster(t, testcluster.Options{Nodes: 3})
	dbs := make([]*client.DB, clients)
	for i := range dbs {
		dbs[i] = openWorkloadDB(t, c)
	}
	oracleLeader := rangeLeaderPicker(t, c, kvserver.OracleRangeID, "the oracle")
	h := testcluster.NewHistory()
	var mu sync.Mutex
	var ops []tsOp // over both rounds
	for round, makeFault := range []func(*testcluster.Cluster, func() int) fault{killFault, partitionFault} {
		total := clients * callsPerClient
		n := startNemesis(t, total, makeFault(c, oracleLeader))
		var okCalls atomic.Int64
		errs := map[string]int{}
		stop := make(chan struct{})
		go watchProgress(t, "oracle", okCalls.Load, stop)
		var wg sync.WaitGroup
		for ci := range dbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range callsPerClient {
					ctx, cancel := context.WithTimeout(context.Background(), opDeadline)
					call := h.Now()
					ts, err := dbs[ci].Timestamp(ctx)
					ret := h.Now()
					cancel()
					mu.Lock()
					if err == nil {
						ops = append(ops, tsOp{client: ci, call: call, return_: ret, ts: ts})
						okCalls.Add(1)
					} else {
						errs[errClass(err)]++
					}
					mu.Unlock()
					n.done()
				}
			}()
		}
		wg.Wait()
		close(stop)
		n.finish()
		t.Logf("round %d: %d timestamps so far, errors %v", round, len(ops), errs)
		if v := checkTimestamps(ops); len(v) > 0 {
			t.Fatalf("I4 violated:\n%v", v)
		}
	}
}

// TestPutOnNodeWithoutOracleReplica: a leaseholder with no replica of
// range 1 (more nodes than the replication factor) still gets timestamps
// for non-transactional puts, by asking the other nodes where the oracle
// runs. Four nodes, one replica per range: the user ranges lie on nodes
// 3, 4, 1 and 2, and only node 1 holds range 1.
func TestPutOnNodeWithoutOracleReplica(t *testing.T) {
	c := startCluster(t, testcluster.Options{Nodes: 4, ReplicationFactor: 1, InitialRanges: 4})
	db := openDB(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), opDeadline)
	defer cancel()
	for _, k := range []string{"\x10a", "\x50a", "\x90a", "\xd0a"} {
		if err := db.Put(ctx, []byte(k), []byte("v")); err != nil {
			t.Fatalf("put %q: %v", k, err)
		}
		v, ok, err := db.Get(ctx, []byte(k))
		if err != nil || !ok || string(v) != "v" {
			t.Fatalf("get %q: %q %v %v", k, v, ok, err)
		}
	}
}
