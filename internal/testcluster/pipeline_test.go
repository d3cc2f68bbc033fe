package testcluster_test

import (
	"strings"
	"testing"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/canopy-db/canopy/internal/testcluster/check"
)

// Transactional pipelining (client.Options.Pipelining, on by default)
// under the fault workloads: a pipelined write is answered once its
// leaseholder has proposed it, so a leaseholder stopped with writes in
// flight loses some of them. Their transactions must find out when they
// prove them (ReasonPipelinedWriteFailed) and retry, never commit. The
// switch-combination runs are in switches_test.go.

// TestPipelinedSerializableListAppend is TestSerializableListAppend (the
// leaseholder of the keys' first range stopped and restarted, a
// status-table leader partitioned, a split) with every transaction
// pipelined: the history must have no anomaly.
func TestPipelinedSerializableListAppend(t *testing.T) {
	seed := testSeed(t)
	txns := runListAppend(t, seed, client.WithPipelining(true))
	ok, anomalies := check.CheckListAppend(txns)
	if !ok {
		t.Fatalf("pipelined serializable list-append history has anomalies:\n%s", strings.Join(anomalies, "\n"))
	}
}

// TestPipelinedBankLeaderKill is TestBankLeaderKill with clients that
// pipeline every transaction: the total holds, no acknowledged transfer
// is lost, none reported as not committed shows, the balances match the
// receipts, and the replicas converge (I1, I2, I3, I5).
func TestPipelinedBankLeaderKill(t *testing.T) {
	seed := testSeed(t)
	accounts, transfers, workers := bankSizes()
	c := startCluster(t, testcluster.Options{Nodes: 3, InitialRanges: 4})
	admin := openDB(t, c)
	b := newBankWorkload(accounts)
	b.setup(t, admin)
	dbs := make([]*client.DB, workers)
	for i := range dbs {
		dbs[i] = openWorkloadDB(t, c, func(o *client.Options) { o.Pipelining = client.ToggleOn })
	}
	n := startNemesis(t, transfers, killFault(c, leaseholderPicker(t, admin, c, b.keys)))
	b.run(t, dbs, seed, transfers, n)
	n.finish()
	var pipelined, stalls, failed int64
	for _, db := range dbs {
		st := db.Stats()
		pipelined += st.PipelinedWrites
		stalls += st.PipelineStalls
		failed += st.PipelinedWritesFailed
	}
	// How many writes were in flight at the kill depends on timing: it is
	// reported, not asserted. That pipelining was on is asserted.
	t.Logf("pipelining: %d writes pipelined, %d stalls, %d pipelined writes found missing by their proofs", pipelined, stalls, failed)
	if pipelined == 0 {
		t.Error("pipelining was on, but no write was pipelined")
	}
	b.verify(t, admin)
	for _, db := range dbs {
		_ = db.Close()
	}
	_ = admin.Close()
	checkReplicas(t, c)
}
