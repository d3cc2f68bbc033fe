package kvserver_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// encodingOf is the cluster's status-table encoding, as its settings say.
func encodingOf(t *testing.T, s *rpcpb.ClusterSettings) txnstatus.Encoding {
	t.Helper()
	newEnc := txnstatus.NewTickets
	switch s.GetStatusEncoding() {
	case "v1":
		return txnstatus.NewV1()
	case "tickets-mix":
		newEnc = txnstatus.NewTicketsMix
	}
	enc, err := newEnc(s.GetTicketsPartitioningQuantum(), s.GetTicketsRowsPerQuantum())
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// commitRecords counts, on node i, the staging keys (STAGING or FENCE
// records) in the status table, those of them whose status key holds a
// decision, and the key records (plain slots) of user keys: the records
// parallel commits and 1PC leave.
func commitRecords(t *testing.T, c *testcluster.Cluster, i int, enc txnstatus.Encoding) (staging, decided, keyRecords int) {
	t.Helper()
	count := func(start, end []byte, f func(k []byte)) {
		for {
			kvs, resume, err := mvcc.ScanPlain(c.Node(i).Engine(), start, end, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range kvs {
				f(kv.Key)
			}
			if len(resume) == 0 {
				return
			}
			start = resume
		}
	}
	count(keys.StatusPrefix, keys.UserPrefix, func(k []byte) {
		if _, err := txnstatus.StagingStartTs(enc, k[len(keys.StatusPrefix):]); err == nil {
			staging++
			if _, found, err := mvcc.GetPlain(c.Node(i).Engine(), k[:len(k)-1]); err != nil {
				t.Fatal(err)
			} else if found {
				decided++
			}
		}
	})
	count(keys.UserPrefix, keys.UserEnd, func([]byte) { keyRecords++ })
	return staging, decided, keyRecords
}

// TestGCOfCommitRecords: the records parallel commits and one-phase
// commits leave (STAGING and FENCE records of decided transactions,
// refusals and 1PC entries in key records) are removed by GC down to the
// bound (the STAGING record of a transaction nobody has decided yet),
// while every transaction's outcome stays as it was: the bank total is
// unchanged, and looking each transaction up by start_ts gives the answer
// its client got.
func TestGCOfCommitRecords(t *testing.T) {
	c, db := gcFixture(t)
	ctx := context.Background()
	enc := encodingOf(t, db.Settings())
	const accounts, initial = 12, 100
	acct := func(i int) []byte { return []byte(fmt.Sprintf("acct%02d", i)) }
	for i := 0; i < accounts; i++ {
		if err := db.Put(ctx, acct(i), []byte(strconv.Itoa(initial))); err != nil {
			t.Fatal(err)
		}
	}

	// Transfers: even ones write with Put and commit in parallel (the
	// default switches), odd ones hand their writes to CommitWith (one
	// range here, so one-phase). Every attempt's start_ts is kept.
	type attempt struct {
		start, commit uint64
		committed     bool
		onePC         bool
	}
	var mu sync.Mutex
	var attempts []attempt
	transfer := func(w, j int) error {
		from, to := acct((w*7+j)%accounts), acct((w*7+j*5+1)%accounts)
		if string(from) == string(to) {
			to = acct((w*7 + j + 1) % accounts)
		}
		onePC := j%2 == 1
		var last *client.Txn
		err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
			mu.Lock()
			if last != nil {
				attempts = append(attempts, attempt{start: last.StartTs(), onePC: onePC})
			}
			last = txn
			mu.Unlock()
			read := func(k []byte) (int, error) {
				v, _, err := txn.Get(ctx, k)
				if err != nil {
					return 0, err
				}
				return strconv.Atoi(string(v))
			}
			a, err := read(from)
			if err != nil {
				return err
			}
			b, err := read(to)
			if err != nil {
				return err
			}
			ws := []client.Write{{Key: from, Value: []byte(strconv.Itoa(a - 1))}, {Key: to, Value: []byte(strconv.Itoa(b + 1))}}
			if onePC {
				return txn.CommitWith(ctx, ws...)
			}
			for _, w := range ws {
				if err := txn.Put(ctx, w.Key, w.Value); err != nil {
					return err
				}
			}
			return txn.Commit(ctx)
		})
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			attempts = append(attempts, attempt{start: last.StartTs(), onePC: onePC})
			return err
		}
		attempts = append(attempts, attempt{start: last.StartTs(), commit: last.CommitTs(), committed: true, onePC: onePC})
		return nil
	}
	const workers, each = 4, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < each; j++ {
				if err := transfer(w, j); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("transfer: %v", err)
	}
	st := db.Stats()
	if st.ParallelCommits == 0 || st.OnePCCommits == 0 {
		t.Fatalf("the workload ran %d parallel commits and %d one-phase commits; want both", st.ParallelCommits, st.OnePCCommits)
	}

	// Leftovers of abandoned coordinators, made by hand: an intent of
	// start s1 with a STAGING record naming it (a reader recovers it as
	// committed, and the record stays); an intent of s2 with no record (a
	// reader fences and aborts it: the FENCE stays); a STAGING record of
	// s3 that nobody meets (undecided: GC must keep it).
	rc := newRaw(t, c.Addrs())
	ts := func() uint64 {
		x, err := db.Timestamp(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	putIntent := func(k string, start uint64) {
		key := keys.UserKey([]byte(k))
		resp := rc.send(key, &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PutIntent{PutIntent: &rpcpb.PutIntentRequest{
			Key: key, Value: []byte("v"), Txn: &rpcpb.TxnMeta{StartTs: start}}}})
		if resp.Error != nil {
			t.Fatalf("put intent %s: %v", k, resp.Error)
		}
	}
	stage := func(start, commit uint64, k string) {
		v, err := txnstatus.EncodeStaging(start, commit, []txnstatus.StagedWrite{{Key: keys.UserKey([]byte(k)), ValueHash: rpcpb.IntentValueHash([]byte("v"), false)}})
		if err != nil {
			t.Fatal(err)
		}
		if existed, err := db.StatusTableWrite(ctx, [][]byte{txnstatus.StagingKey(enc, start)}, [][]byte{v}); err != nil || existed != 0 {
			t.Fatalf("STAGING of %d: existed %d, %v", start, existed, err)
		}
	}
	s1 := ts()
	putIntent("recovered", s1)
	c1 := ts()
	stage(s1, c1, "recovered")
	s2 := ts()
	putIntent("fenced", s2)
	s3 := ts()
	stage(s3, ts(), "orphan")
	reader, err := client.Open(ctx, c.Addrs(), client.WithOptions(client.Options{HeartbeatTTL: 5 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	time.Sleep(20 * time.Millisecond) // past s1's and s2's heartbeat TTL
	if v, ok, err := reader.Get(ctx, []byte("recovered")); err != nil || !ok || string(v) != "v" {
		t.Fatalf("read of the recovered write: %q %v %v", v, ok, err)
	}
	if _, ok, err := reader.Get(ctx, []byte("fenced")); err != nil || ok {
		t.Fatalf("read of the fenced write: found %v, %v", ok, err)
	}

	// Every node holds the three staging keys and some key records. Of the
	// decided transactions only s1 and s2 keep theirs: a parallel commit's
	// STAGING record goes with its COMMITTED put, in the same batch (once
	// the client's resolver has run: hence the wait).
	var before [3][3]int
	waitFor(t, "the leftovers on every node", func() error {
		for i := 0; i < 3; i++ {
			s, d, k := commitRecords(t, c, i, enc)
			before[i] = [3]int{s, d, k}
			if s < 3 || d != 2 || k == 0 {
				return fmt.Errorf("n%d: %d staging records (%d decided), %d key records", i+1, s, d, k)
			}
		}
		return nil
	})
	t.Logf("before GC (staging records, decided, key records) per node: %v", before)

	// GC down to the bound: s3's undecided STAGING record only, no key
	// record (every transaction started below the threshold).
	waitFor(t, "GC down to the bound", func() error {
		for i := 0; i < 3; i++ {
			if _, err := c.Node(i).CollectGarbage(ctx); err != nil {
				t.Logf("gc on n%d: %v", i+1, err)
			}
		}
		for i := 0; i < 3; i++ {
			if s, d, k := commitRecords(t, c, i, enc); s != 1 || d != 0 || k != 0 {
				return fmt.Errorf("n%d: %d staging records (%d decided), %d key records", i+1, s, d, k)
			}
		}
		return nil
	})
	// Clean now: further rounds propose nothing on the status ranges (an
	// idle status range stays quiescent).
	statusApplied := func() map[string]uint64 {
		out := map[string]uint64{}
		for i := 0; i < 3; i++ {
			st, err := c.Node(i).Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range st.Ranges {
				if d := r.Range; d != nil && bytes.Compare(d.StartKey, keys.UserPrefix) < 0 && bytes.Compare(d.EndKey, keys.StatusPrefix) > 0 {
					out[fmt.Sprintf("n%d r%d", i+1, d.RangeId)] = r.RaftAppliedIndex
				}
			}
		}
		return out
	}
	beforeRounds := statusApplied()
	for round := 0; round < 3; round++ {
		for i := 0; i < 3; i++ {
			if _, err := c.Node(i).CollectGarbage(ctx); err != nil {
				t.Fatalf("gc on n%d: %v", i+1, err)
			}
		}
	}
	if after := statusApplied(); !maps.Equal(after, beforeRounds) {
		t.Fatalf("GC rounds on clean status ranges proposed commands: applied indexes %v -> %v", beforeRounds, after)
	}
	removed := map[string]float64{}
	for i := 0; i < 3; i++ {
		for _, kind := range []string{"staging_record", "fence_record", "one_pc_entry"} {
			removed[kind] += metricSum(t, c.Node(i).Metrics(), "canopy_gc_removed_total", "kind", kind)
		}
	}
	if removed["staging_record"] < 1 || removed["fence_record"] < 1 || removed["one_pc_entry"] < 1 {
		t.Fatalf("canopy_gc_removed_total: %v", removed)
	}
	t.Logf("removed by GC: %v", removed)

	// Outcomes. The bank total holds.
	total := 0
	if err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		total = 0
		for i := 0; i < accounts; i++ {
			v, _, err := txn.Get(ctx, acct(i))
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(string(v))
			if err != nil {
				return err
			}
			total += n
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if total != accounts*initial {
		t.Fatalf("bank total %d, want %d", total, accounts*initial)
	}
	// Lookups by start_ts: a committed transaction with a status record
	// reads committed at its commit timestamp; a 1PC one has no record and
	// never gets one; no attempt that failed reads committed.
	for _, a := range attempts {
		s, err := db.TxnStatus(ctx, a.start)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case s.Staged || s.Fenced:
			t.Errorf("transaction %d: staging record left after GC: %+v", a.start, s)
		case a.committed && a.onePC && s.Decided:
			t.Errorf("one-phase transaction %d has a status record: %+v", a.start, s)
		case a.committed && !a.onePC && (!s.Decided || s.Aborted || s.CommitTs != a.commit):
			t.Errorf("transaction %d committed at %d; the status table says %+v", a.start, a.commit, s)
		case !a.committed && s.Decided && !s.Aborted:
			t.Errorf("failed attempt %d reads committed: %+v", a.start, s)
		}
	}
	for _, x := range []struct {
		start   uint64
		want    client.TxnStatus
		comment string
	}{
		{s1, client.TxnStatus{Decided: true, CommitTs: c1}, "recovered as committed"},
		{s2, client.TxnStatus{Decided: true, Aborted: true}, "fenced and aborted"},
	} {
		s, err := db.TxnStatus(ctx, x.start)
		if err != nil {
			t.Fatal(err)
		}
		if s != x.want {
			t.Errorf("transaction %d (%s): %+v, want %+v", x.start, x.comment, s, x.want)
		}
	}
	if s, err := db.TxnStatus(ctx, s3); err != nil || !s.Staged || s.Decided {
		t.Errorf("undecided transaction %d: %+v, %v", s3, s, err)
	}
	// A late STAGING put of a decided transaction whose FENCE GC removed
	// finds a FENCE and writes nothing.
	v, err := txnstatus.EncodeStaging(s2, ts(), []txnstatus.StagedWrite{{Key: keys.UserKey([]byte("fenced")), ValueHash: 1}})
	if err != nil {
		t.Fatal(err)
	}
	sk := txnstatus.StagingKey(enc, s2)
	if existed, err := db.StatusTableWrite(ctx, [][]byte{sk}, [][]byte{v}); err != nil || existed != 1 {
		t.Fatalf("late STAGING put of %d: existed %d, %v", s2, existed, err)
	}
	if got, err := db.StatusTableRead(ctx, [][]byte{sk}); err != nil || got[0] != nil {
		t.Fatalf("staging key of %d after a late STAGING put: %q, %v", s2, got, err)
	}
	if s, err := db.TxnStatus(ctx, s2); err != nil || !s.Decided || !s.Aborted || s.Staged {
		t.Fatalf("transaction %d after a late STAGING put: %+v, %v", s2, s, err)
	}
}
