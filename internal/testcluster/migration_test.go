package testcluster_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/eval"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// migrationExtension is the clients' status schedule extension in the
// migration test: short, so that each change takes effect soon.
const migrationExtension = 500 * time.Millisecond

// TestBankStatusEncodingMigration runs the bank on a cluster that starts
// with the v1 status encoding and moves to tickets and back to v1 while
// transfers run (issue 10 item 5). In phases: A (v1), B with the change to
// tickets made while it runs, C1 (all in the tickets era: it starts once
// the oracle is past the cutover), C2 with the change back to v1 made
// while it runs, D (all in the second v1 era). The bank's invariants hold
// at the end (the total unchanged, every acknowledged transfer present,
// none applied twice, replicas equal), and the status table holds decided
// records in each of the three eras, read back through the schedule.
//
// It runs with the default protocol and with hierarchy-locking, whose
// deciding nodes write the status records of transactions other clients
// began (they must follow the schedule too).
func TestBankStatusEncodingMigration(t *testing.T) {
	for _, protocol := range []string{"default", "hierarchy-locking"} {
		t.Run(protocol, func(t *testing.T) { testBankStatusEncodingMigration(t, protocol) })
	}
}

func testBankStatusEncodingMigration(t *testing.T, protocol string) {
	seed := testSeed(t)
	accounts, transfers, workers := bankSizes()
	if protocol != "default" {
		transfers = min(transfers, 240) // as TestHierarchyBank
	}
	c := startCluster(t, testcluster.Options{Nodes: 3, InitialRanges: 4, StatusEncoding: "v1", CommitProtocol: protocol})
	short := client.Options{StatusScheduleExtension: migrationExtension}
	admin := openDB(t, c, client.WithOptions(short))
	b := newBankWorkload(accounts)
	b.setup(t, admin)
	dbs := make([]*client.DB, workers)
	for i := range dbs {
		dbs[i] = openWorkloadDB(t, c, func(o *client.Options) {
			o.StatusScheduleExtension = migrationExtension
			o.OnePC = client.ToggleOff // every transfer writes a status record
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupDeadline)
	defer cancel()
	phase := 0
	run := func(n int) {
		b.workerBase = phase * workers
		phase++
		b.run(t, dbs, seed+uint64(phase), n, nil)
	}
	// runWhile runs n transfers while changing the encoding to enc, and
	// then waits until the oracle is past the change's cutover.
	runWhile := func(n int, enc string) uint64 {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); run(n) }()
		time.Sleep(50 * time.Millisecond) // let the transfers start: the change lands under load
		s, err := admin.SetStatusEncoding(ctx, enc)
		wg.Wait()
		if err != nil {
			t.Fatalf("moving to %s: %v", enc, err)
		}
		from := s.Eras[len(s.Eras)-1].From
		t.Logf("status encoding %s from start_ts %d (schedule version %d)", enc, from, s.Version)
		for {
			now, err := admin.Timestamp(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if now > from {
				return from
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	per := transfers / 3
	run(per / 2)                      // A
	from1 := runWhile(per, "tickets") // B
	run(per / 2)                      // C1
	from2 := runWhile(per/2, "v1")    // C2
	run(per / 2)                      // D
	b.verify(t, admin)

	s, err := admin.StatusEncodingSchedule(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Eras) != 3 || s.Eras[0].Encoding != "v1" || s.Eras[1].Encoding != "tickets" || s.Eras[2].Encoding != "v1" ||
		s.Eras[1].From != from1 || s.Eras[2].From != from2 {
		t.Fatalf("schedule %+v, want eras v1, tickets from %d, v1 from %d", s, from1, from2)
	}
	end, err := admin.Timestamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bounds := []uint64{1, from1, from2, end}
	for i := range 3 {
		decided := 0
		err := admin.ScanTxns(ctx, bounds[i], bounds[i+1], func(r client.TxnRecord) error {
			if r.Decided {
				decided++
			}
			return nil
		})
		if err != nil {
			t.Fatalf("scanning era %d: %v", i, err)
		}
		t.Logf("era %d (%s, start_ts [%d, %d)): %d decided transactions", i, s.Eras[i].Encoding, bounds[i], bounds[i+1], decided)
		if decided == 0 {
			t.Errorf("era %d (%s) holds no decided transaction", i, s.Eras[i].Encoding)
		}
	}
	for _, db := range dbs {
		_ = db.Close()
	}
	_ = admin.Close()
	checkReplicas(t, c)
	// The versions the extensions and changes wrote are pruned down to
	// the newest eval.StatusScheduleVersionsKept on every replica of
	// range 1 (each Raft command that writes one deletes the old ones);
	// the replicas are equal now (checkReplicas).
	for i := range 3 {
		kvs, _, err := mvcc.ScanPlain(c.Node(i).Engine(), keys.StatusSchedulePrefix, keys.HeartbeatPrefix, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(kvs) > eval.StatusScheduleVersionsKept || (s.Version >= eval.StatusScheduleVersionsKept && len(kvs) != eval.StatusScheduleVersionsKept) {
			t.Errorf("node %d holds %d schedule versions (version %d read), want %d at most and exactly that once as many were written",
				i, len(kvs), s.Version, eval.StatusScheduleVersionsKept)
		}
	}
}
