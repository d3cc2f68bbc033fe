package client

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// TestRecoverAbandonedStaging: a coordinator wrote its STAGING record and
// died (its heartbeat expired). A reader that meets one of its intents
// recovers it: all staged writes in place -> COMMITTED at the record's
// timestamp, and the reader sees the value; one missing -> that write is
// refused, ABORTED, and the reader sees the old value. Either way the
// reader resolves every staged write, met or not.
func TestRecoverAbandonedStaging(t *testing.T) {
	for _, tc := range []struct {
		name      string
		missing   bool
		wantValue string
	}{
		{"all-in-place", false, "new"},
		{"one-missing", true, "old"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeCluster(t, 1)
			db := c.open()
			ka, kb := keys.UserKey([]byte("a")), keys.UserKey([]byte("b"))
			c.putVersion(ka, 5, []byte("old"))
			c.putIntent(ka, 7, []byte("new"))
			if !tc.missing {
				c.putIntent(kb, 7, []byte("new-b"))
			}
			c.setPlain(keys.HeartbeatKey(7), heartbeatValue(fakeNow.Add(-time.Second)))
			st, err := txnstatus.EncodeStaging(7, 9, []txnstatus.StagedWrite{
				{Key: ka, ValueHash: rpcpb.IntentValueHash([]byte("new"), false)},
				{Key: kb, ValueHash: rpcpb.IntentValueHash([]byte("new-b"), false)},
			})
			if err != nil {
				t.Fatal(err)
			}
			c.setPlain(db.stagingKey(7), st)

			if got := mustGet(t, db, "a"); got != tc.wantValue {
				t.Fatalf("a = %q, want %q", got, tc.wantValue)
			}
			found, commitTs, aborted := c.status(7)
			if !found || aborted == !tc.missing || (!tc.missing && commitTs != 9) {
				t.Fatalf("status: found=%v commit_ts=%d aborted=%v", found, commitTs, aborted)
			}
			if db.Stats().Recovered != 1 || db.Stats().AbortedOthers != 0 {
				t.Fatalf("stats = %+v", db.Stats())
			}
			if tc.missing {
				// The reader resolved every staged key as aborted, which
				// dropped the refusal: a late copy of the missing write may
				// now land, and it is harmless (the status says aborted).
				_, _ = db.sender.sendOne(bg, true, &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PutIntent{PutIntent: &rpcpb.PutIntentRequest{
					Key: kb, Value: []byte("new-b"), Txn: &rpcpb.TxnMeta{StartTs: 7}}}})
				if v, ok, err := db.Get(bg, []byte("b")); err != nil || ok {
					t.Fatalf("b = %q, %v, %v after recovery aborted its writer", v, ok, err)
				}
			}
			if c.hasIntent(ka) || c.hasIntent(kb) {
				t.Fatal("recovery left intents of the recovered transaction")
			}
		})
	}
}

// TestExpiredTransactionIsFenced: a reader aborting an expired transaction
// first fences its staging key, so that a coordinator that was only slow
// cannot write STAGING afterwards and be told it committed.
func TestExpiredTransactionIsFenced(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	k := keys.UserKey([]byte("k"))
	c.putIntent(k, 7, []byte("pending"))
	c.setPlain(keys.HeartbeatKey(7), heartbeatValue(fakeNow.Add(-time.Second)))
	mustGet(t, db, "k")
	v, ok := c.getPlain(db.stagingKey(7))
	if !ok {
		t.Fatal("no fence at the staging key")
	}
	if s, err := txnstatus.DecodeStaging(7, v); err != nil || !s.Fence {
		t.Fatalf("staging key holds %+v, %v; want a fence", s, err)
	}
	if found, _, aborted := c.status(7); !found || !aborted {
		t.Fatal("expired transaction not aborted")
	}
	// The slow coordinator's STAGING put now loses.
	sv, _ := txnstatus.EncodeStaging(7, 9, nil)
	won, _, err := db.putUnlessExists(context.Background(), db.stagingKey(7), sv)
	if err != nil || won {
		t.Fatalf("STAGING after the fence: won=%v err=%v", won, err)
	}
}

// TestParallelCommitEndToEnd: with pipelining and parallel commits, a
// transaction is acknowledged implicitly committed, and its COMMITTED
// status is recorded before any of its intents is resolved.
func TestParallelCommitEndToEnd(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(func(o *Options) { o.Pipelining = ToggleOn })
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		if err := txn.Put(ctx, []byte("a"), []byte("1")); err != nil {
			return err
		}
		return txn.Put(ctx, []byte("b"), []byte("2"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := db.Stats().ParallelCommits; n != 1 {
		t.Fatalf("parallel commits: %d", n)
	}
	if err := db.Close(); err != nil { // drains the cleanup
		t.Fatal(err)
	}
	if n := c.plainCount(keys.StatusPrefix); n != 1 {
		t.Fatalf("%d records in the status table after the cleanup, want 1 (COMMITTED; the STAGING record deleted)", n)
	}
	reader := c.open()
	if got := mustGet(t, reader, "b"); got != "2" {
		t.Fatalf("b = %q", got)
	}
	if reader.Stats().Recovered != 0 {
		t.Fatal("the reader had to recover a transaction whose client recorded it")
	}
}

// TestTxnSwitchesAtRunTime: the cluster setting changes what transactions
// begun afterwards do, in this client at once and in another after its
// refresh; TxnOptions override it.
func TestTxnSwitchesAtRunTime(t *testing.T) {
	c := newFakeCluster(t, 1)
	admin := c.open()
	if err := admin.SetTxnSwitches(bg, TxnSwitches{Pipelining: ToggleOff}); err != nil {
		t.Fatal(err)
	}
	db := c.open(func(o *Options) { o.SettingsRefresh = time.Hour })
	write := func(db *DB, opts ...TxnOption) {
		t.Helper()
		if err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
			return txn.Put(ctx, []byte("k"), []byte("v"))
		}, opts...); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.SetTxnSwitches(bg, TxnSwitches{Pipelining: ToggleOn}); err != nil {
		t.Fatal(err)
	}
	write(admin)
	if st := admin.Stats(); st.PipelinedWrites != 1 || st.ParallelCommits != 1 {
		t.Fatalf("pipelining on by the setting: %+v", st)
	}
	if err := admin.SetTxnSwitches(bg, TxnSwitches{Pipelining: ToggleOn, ParallelCommits: ToggleOff}); err != nil {
		t.Fatal(err)
	}
	write(admin)
	if st := admin.Stats(); st.PipelinedWrites != 2 || st.ParallelCommits != 1 {
		t.Fatalf("parallel commits off by the setting: %+v", st)
	}
	write(admin, WithParallelCommits(true))
	if st := admin.Stats(); st.ParallelCommits != 2 {
		t.Fatalf("parallel commits on by TxnOptions: %+v", st)
	}
	// The other client still has the value it read at Open, until it
	// refreshes.
	write(db)
	if st := db.Stats(); st.PipelinedWrites != 0 {
		t.Fatalf("before its refresh, the other client pipelined: %+v", st)
	}
	if err := db.refreshSwitches(bg); err != nil {
		t.Fatal(err)
	}
	write(db)
	if st := db.Stats(); st.PipelinedWrites != 1 || st.ParallelCommits != 0 {
		t.Fatalf("after its refresh: %+v", st)
	}
	if s, err := db.TxnSwitches(bg); err != nil || s != (TxnSwitches{Pipelining: ToggleOn, ParallelCommits: ToggleOff}) {
		t.Fatalf("TxnSwitches = %v, %v", s, err)
	}
}

// plainCount counts the plain keys with the given prefix.
func (c *fakeCluster) plainCount(prefix []byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k := range c.mu.plain {
		if strings.HasPrefix(k, string(prefix)) {
			n++
		}
	}
	return n
}

// TestParallelCommitTooManyStagedBytes: in-flight keys too large for one
// STAGING value (the server's ValueBytesMax) take the ordinary path:
// proofs, then the commit point; no STAGING put is sent.
func TestParallelCommitTooManyStagedBytes(t *testing.T) {
	var log stepLog
	lower := newScriptedLower(&log)
	var st stats
	c := &txnCommitter{next: lower, startTs: 100, abortTimeout: time.Second, logger: slog.New(slog.NewTextHandler(io.Discard, nil)), stats: &st}
	big := strings.Repeat("k", stagingBytesMax/2)
	ws := []inFlightWrite{{key: []byte(big + "1"), seq: 1}, {key: []byte(big + "2"), seq: 2}}
	resp, err := c.send(bg, &txnReq{op: opCommit, proofs: ws})
	if err != nil || resp.implicit {
		t.Fatalf("commit: %+v %v", resp, err)
	}
	var ops []string
	for _, l := range log.take() {
		ops = append(ops, strings.Fields(l)[1])
	}
	if got := strings.Join(ops, " "); got != "timestamp refresh prove put-status" {
		t.Fatalf("requests: %s", got)
	}
}
