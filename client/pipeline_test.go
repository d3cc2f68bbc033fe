package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/canopy-db/canopy/internal/keys"
)

// Transactional pipelining end to end over the fake cluster
// (txn_pipeliner.go has the design; testdata/layers/pipeliner the steps).

func pipelined(o *Options) { o.Pipelining = ToggleOn }

// A pipelined transaction writes with async consensus, reads its own
// writes (proving them first), commits after proving the rest, and leaves
// nothing behind.
func TestPipelinedTxnCommit(t *testing.T) {
	c := newFakeCluster(t, 3)
	db := c.open(pipelined)
	var start uint64
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		start = txn.StartTs()
		for _, k := range []string{"a", "b", "c"} {
			if err := txn.Put(ctx, []byte(k), []byte("v"+k)); err != nil {
				return err
			}
		}
		if err := txn.Delete(ctx, []byte("d")); err != nil {
			return err
		}
		v, ok, err := txn.Get(ctx, []byte("a"))
		if err != nil || !ok || string(v) != "va" {
			return fmt.Errorf("own write: %q %v %v", v, ok, err)
		}
		kvs, err := txn.Scan(ctx, []byte("b"), nil, 0)
		if err != nil || len(kvs) != 2 {
			return fmt.Errorf("own scan: %v %v", kvs, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found, _, aborted := c.status(start); !found || aborted {
		t.Fatal("not committed")
	}
	for k, want := range map[string]string{"a": "va", "b": "vb", "c": "vc", "d": "<missing>"} {
		if got := mustGet(t, db, k); got != want {
			t.Fatalf("%s = %q, want %q", k, got, want)
		}
	}
	st := db.Stats()
	if st.PipelinedWrites != 4 || st.PipelineStalls != 2 || st.PipelinedWritesFailed != 0 {
		t.Fatalf("stats = %+v", st)
	}
	if n := c.asyncBatchCount(); n != 4 {
		t.Fatalf("%d batches with async consensus, want 4", n)
	}
	// a proven by the Get, b and c by the Scan, d at commit: 4 proofs.
	if n := c.reqCount("QueryIntent"); n != 4 {
		t.Fatalf("%d QueryIntent requests, want 4", n)
	}
	closeAndCheckClean(t, c, db)
}

// The DB-wide switch and the per-transaction one: the transaction's wins
// unless it is ToggleDefault; the default is off.
func TestPipeliningSwitches(t *testing.T) {
	for _, tc := range []struct {
		db, txn Toggle
		want    bool
	}{
		{ToggleDefault, ToggleDefault, pipeliningDefault},
		{ToggleOn, ToggleDefault, true},
		{ToggleOff, ToggleDefault, false},
		{ToggleDefault, ToggleOn, true},
		{ToggleOff, ToggleOn, true},
		{ToggleOn, ToggleOff, false},
	} {
		t.Run(fmt.Sprintf("db=%v/txn=%v", tc.db, tc.txn), func(t *testing.T) {
			c := newFakeCluster(t, 1)
			db := c.open(func(o *Options) { o.Pipelining = tc.db })
			var opts []TxnOption
			if tc.txn != ToggleDefault {
				opts = append(opts, WithPipelining(tc.txn == ToggleOn))
			}
			if err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
				return txn.Put(ctx, []byte("a"), []byte("1"))
			}, opts...); err != nil {
				t.Fatal(err)
			}
			if got := c.asyncBatchCount() > 0; got != tc.want {
				t.Fatalf("pipelined = %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := (&DB{}).Begin(bg, func(o *TxnOptions) { o.Pipelining = 7 }); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("TxnOptions.Pipelining 7: %v", err)
	}
	o := Options{Pipelining: -1}
	o.EnsureDefaults()
	if err := o.Validate(); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Options.Pipelining -1: %v", err)
	}
	o = Options{PipelinedBytesMax: pipelinedBytesLimit + 1}
	o.EnsureDefaults()
	if err := o.Validate(); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("PipelinedBytesMax above the limit: %v", err)
	}
}

// A pipelined write that fails to replicate is found missing by the
// commit's proof: that attempt never commits (its status says aborted),
// the transaction runs again and commits, and nothing is left behind.
func TestPipelinedWriteFailedAtCommit(t *testing.T) {
	c := newFakeCluster(t, 3)
	db := c.open(pipelined)
	var drop atomic.Bool
	drop.Store(true)
	c.setDropAsync(func(k []byte) bool {
		return bytes.Equal(k, keys.UserKey([]byte("b"))) && drop.Swap(false)
	})
	var starts []uint64
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		starts = append(starts, txn.StartTs())
		if err := txn.Put(ctx, []byte("a"), fmt.Appendf(nil, "%d", len(starts))); err != nil {
			return err
		}
		return txn.Put(ctx, []byte("b"), fmt.Appendf(nil, "%d", len(starts)))
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(starts) != 2 {
		t.Fatalf("%d attempts, want 2", len(starts))
	}
	if found, _, aborted := c.status(starts[0]); !found || !aborted {
		t.Fatal("the attempt with the failed write is not recorded as aborted")
	}
	if got := mustGet(t, db, "a") + mustGet(t, db, "b"); got != "22" {
		t.Fatalf("a, b = %q, want both from the second attempt", got)
	}
	if st := db.Stats(); st.PipelinedWritesFailed != 1 || st.Retries != 1 {
		t.Fatalf("stats = %+v", st)
	}
	closeAndCheckClean(t, c, db)
}

// The same failure found by a later read of the key: the read fails
// retryably (it never returns a value without the transaction's write),
// and the transaction is poisoned, so swallowing the error cannot commit.
func TestPipelinedWriteFailedAtRead(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(pipelined)
	mustPut(t, db, "a", "old")
	var drop atomic.Bool
	drop.Store(true)
	c.setDropAsync(func(k []byte) bool { return drop.Swap(false) })
	attempts := 0
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		attempts++
		if err := txn.Put(ctx, []byte("a"), []byte("new")); err != nil {
			return err
		}
		v, _, err := txn.Get(ctx, []byte("a"))
		if attempts == 1 {
			var re *RetryableError
			if !errors.As(err, &re) || re.Reason != ReasonPipelinedWriteFailed {
				t.Errorf("read after a failed pipelined write: %q, %v", v, err)
			}
			return nil // swallowed: the commit must still fail
		}
		if err != nil || string(v) != "new" {
			return fmt.Errorf("own write: %q %v", v, err)
		}
		return nil
	})
	if err != nil || attempts != 2 {
		t.Fatalf("err %v, attempts %d", err, attempts)
	}
	if got := mustGet(t, db, "a"); got != "new" {
		t.Fatalf("a = %q", got)
	}
	closeAndCheckClean(t, c, db)
}

// Pipelined writes that always fail to replicate: no attempt ever
// commits, and DB.Txn gives up with the new reason.
func TestPipelinedWriteFailingNeverCommits(t *testing.T) {
	c := newFakeCluster(t, 3)
	db := c.open(pipelined)
	c.setDropAsync(func(k []byte) bool { return bytes.Equal(k, keys.UserKey([]byte("b"))) })
	var starts []uint64
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		starts = append(starts, txn.StartTs())
		if err := txn.Put(ctx, []byte("a"), []byte("1")); err != nil {
			return err
		}
		return txn.Put(ctx, []byte("b"), []byte("1"))
	}, WithAttemptsMax(4))
	var re *RetryableError
	if !errors.As(err, &re) || re.Reason != ReasonPipelinedWriteFailed {
		t.Fatalf("err = %v, want ReasonPipelinedWriteFailed", err)
	}
	if len(starts) != 4 {
		t.Fatalf("%d attempts, want 4", len(starts))
	}
	for _, s := range starts {
		if found, _, aborted := c.status(s); !found || !aborted {
			t.Fatalf("attempt %d: status found=%v aborted=%v, want aborted", s, found, aborted)
		}
	}
	if got := mustGet(t, db, "a"); got != "<missing>" {
		t.Fatalf("a = %q: a transaction without its write to b committed", got)
	}
	closeAndCheckClean(t, c, db)
}

// Beyond PipelinedBytesMax writes are synchronous again.
func TestPipelinedBytesMax(t *testing.T) {
	c := newFakeCluster(t, 1)
	// Each write below charges its key (user prefix plus 2 bytes) and 10
	// bytes of value.
	charge := len(keys.UserKey([]byte("k0"))) + 10
	db := c.open(pipelined, func(o *Options) { o.PipelinedBytesMax = 3 * charge })
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		for i := range 5 {
			if err := txn.Put(ctx, fmt.Appendf(nil, "k%d", i), []byte("0123456789")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := c.asyncBatchCount(); n != 3 {
		t.Fatalf("%d pipelined writes, want 3 (the budget's worth)", n)
	}
	if n := c.reqCount("PutIntent"); n != 5 {
		t.Fatalf("%d PutIntents, want 5", n)
	}
	closeAndCheckClean(t, c, db)
}

// A rolled-back transaction's pipelined writes are resolved with the
// others; and one that lands after the resolution (a late proposal) is
// resolved by the first reader, who finds the transaction aborted.
func TestPipelinedAbortCleanup(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(pipelined)
	mustPut(t, db, "late", "committed")
	txn, err := db.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if err := txn.Put(bg, []byte(k), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := txn.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	closeAndCheckClean(t, c, db)
	// The late intent: written after the abort was recorded and the
	// transaction's own cleanup ran.
	c.putIntent(keys.UserKey([]byte("late")), txn.StartTs(), []byte("aborted write"))
	db2 := c.open()
	if got := mustGet(t, db2, "late"); got != "committed" {
		t.Fatalf("late = %q", got)
	}
	if c.hasIntent(keys.UserKey([]byte("late"))) {
		t.Fatal("the late intent of an aborted transaction is still there after a read")
	}
}

// Concurrent transfers with pipelining keep the total, with some pipelined
// writes failing to replicate along the way.
func TestPipelinedConcurrentTransfers(t *testing.T) {
	c := newFakeCluster(t, 3)
	var mu sync.Mutex
	n := 0
	c.setDropAsync(func([]byte) bool {
		mu.Lock()
		defer mu.Unlock()
		n++
		return n%7 == 0
	})
	runTransfers(t, c, pipelined)
}
