package testcluster_test

import (
	"strings"
	"testing"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/canopy-db/canopy/internal/testcluster/check"
)

// The fault workloads over each combination of the transaction switches
// (issue 8 item 5): pipelining, parallel commits (only with pipelining)
// and one-phase commit (the workloads then hand their writes to
// Txn.CommitWith, which commits in one phase when they fit one range and
// the ordinary way otherwise). Each run has the leaseholder of the busy
// range stopped and restarted (and, for list-append, a status-table leader
// partitioned and a split); the checkers are the ones of the default runs.

type switchCombo struct {
	name       string
	opts       []client.TxnOption
	commitWith bool
}

func switchCombos() []switchCombo {
	all := []switchCombo{
		{name: "all-off", opts: []client.TxnOption{client.WithPipelining(false), client.WithOnePC(false)}},
		{name: "pipelining", opts: []client.TxnOption{client.WithPipelining(true), client.WithParallelCommits(false), client.WithOnePC(false)}},
		{name: "pipelining+parallel", opts: []client.TxnOption{client.WithPipelining(true), client.WithParallelCommits(true), client.WithOnePC(false)}},
		{name: "1pc", opts: []client.TxnOption{client.WithPipelining(false), client.WithOnePC(true)}, commitWith: true},
		{name: "all-on", opts: []client.TxnOption{client.WithPipelining(true), client.WithParallelCommits(true), client.WithOnePC(true)}, commitWith: true},
	}
	if testing.Short() {
		return []switchCombo{all[0], all[4]}
	}
	return all
}

// TestListAppendSwitches: serializable list-append histories have no
// anomaly under every combination of switches (I3).
func TestListAppendSwitches(t *testing.T) {
	for _, sc := range switchCombos() {
		t.Run(sc.name, func(t *testing.T) {
			seed := testSeed(t)
			txns := runListAppendMode(t, seed, sc.commitWith, sc.opts...)
			if ok, anomalies := check.CheckListAppend(txns); !ok {
				t.Fatalf("%s: list-append history has anomalies:\n%s", sc.name, strings.Join(anomalies, "\n"))
			}
		})
	}
}

// TestBankSwitches: the bank's invariants (total preserved, no
// acknowledged transfer lost, none reported as not committed shows, the
// balances match the receipts, I5) under every combination of switches,
// with the accounts' leaseholder killed and restarted.
func TestBankSwitches(t *testing.T) {
	for _, sc := range switchCombos() {
		t.Run(sc.name, func(t *testing.T) {
			seed := testSeed(t)
			accounts, transfers, workers := bankSizes()
			c := startCluster(t, testcluster.Options{Nodes: 3, InitialRanges: 4})
			admin := openDB(t, c)
			b := newBankWorkload(accounts)
			b.txnOpts, b.commitWith = sc.opts, sc.commitWith
			b.setup(t, admin)
			dbs := make([]*client.DB, workers)
			for i := range dbs {
				dbs[i] = openWorkloadDB(t, c)
			}
			n := startNemesis(t, transfers, killFault(c, leaseholderPicker(t, admin, c, b.keys)))
			b.run(t, dbs, seed, transfers, n)
			n.finish()
			var st client.Stats
			for _, db := range dbs {
				s := db.Stats()
				st.PipelinedWrites += s.PipelinedWrites
				st.ParallelCommits += s.ParallelCommits
				st.OnePCCommits += s.OnePCCommits
				st.Recovered += s.Recovered
			}
			// How many of each depends on timing and placement: reported,
			// not asserted (that each switch took effect is asserted
			// where it cannot depend on timing: the client tests).
			t.Logf("%s: %d pipelined writes, %d parallel commits, %d one-phase commits, %d recovered", sc.name,
				st.PipelinedWrites, st.ParallelCommits, st.OnePCCommits, st.Recovered)
			b.verify(t, admin)
			for _, db := range dbs {
				_ = db.Close()
			}
			_ = admin.Close()
			checkReplicas(t, c)
		})
	}
}
