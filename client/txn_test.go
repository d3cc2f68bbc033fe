package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/tso"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

var bg = context.Background()

// closeAndCheckClean closes db (draining asynchronous resolution) and
// checks that no intent or heartbeat record is left.
func closeAndCheckClean(t *testing.T, c *fakeCluster, db *DB) {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if n := c.intentCount(); n != 0 {
		t.Fatalf("%d intents left after Close", n)
	}
	if n := c.heartbeatRecords(); n != 0 {
		t.Fatalf("%d heartbeat records left after Close", n)
	}
}

func TestTxnCommit(t *testing.T) {
	c := newFakeCluster(t, 3)
	db := c.open()
	var start uint64
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		start = txn.StartTs()
		if err := txn.Put(ctx, []byte("a"), []byte("1")); err != nil {
			return err
		}
		if err := txn.Put(ctx, []byte("b"), []byte("2")); err != nil {
			return err
		}
		if err := txn.Delete(ctx, []byte("c")); err != nil {
			return err
		}
		// Read your writes, by Get and by Scan.
		v, ok, err := txn.Get(ctx, []byte("a"))
		if err != nil || !ok || string(v) != "1" {
			return fmt.Errorf("own write: %q %v %v", v, ok, err)
		}
		kvs, err := txn.Scan(ctx, nil, nil, 0)
		if err != nil || len(kvs) != 2 {
			return fmt.Errorf("own scan: %v %v", kvs, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	found, commitTs, aborted := c.status(start)
	if !found || aborted || commitTs <= start {
		t.Fatalf("status = %v %d %v", found, commitTs, aborted)
	}
	if got := mustGet(t, db, "a"); got != "1" {
		t.Fatalf("a = %q", got)
	}
	st := db.Stats()
	if st.Commits != 1 || st.Retries != 0 || st.Aborts != 0 {
		t.Fatalf("stats = %+v", st)
	}
	closeAndCheckClean(t, c, db)
}

// A read-only transaction writes nothing at all.
func TestTxnReadOnlyWritesNothing(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	mustPut(t, db, "a", "1")
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		_, _, err := txn.Get(ctx, []byte("a"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := c.reqCount("PlainPutUnlessExists") + c.reqCount("PlainPut") + c.reqCount("Refresh"); n != 0 {
		t.Fatalf("read-only transaction sent %d status/heartbeat/refresh requests", n)
	}
}

// Every intent is written while its transaction is provably alive to a
// reader: a young transaction (start_ts within HeartbeatTTL/5 of the
// clock) is alive by its start_ts alone and writes no heartbeat record; an
// older one writes a live record before its first intent.
func TestEveryIntentHasALiveTransaction(t *testing.T) {
	for _, young := range []bool{true, false} {
		t.Run(fmt.Sprintf("young=%v", young), func(t *testing.T) {
			c := newFakeCluster(t, 1)
			if young {
				c.mu.Lock()
				c.mu.clock = uint64(fakeNow.UnixMilli()) << tso.DefaultLogicalBits
				c.mu.Unlock()
			}
			db := c.open()
			var uncovered, records atomic.Int32
			c.setBeforeBatch(func(node uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
				if p, ok := req.Requests[0].Value.(*rpcpb.RequestUnion_PutIntent); ok {
					v, ok := c.getPlain(p.PutIntent.Txn.HeartbeatKey)
					liveRecord := ok && len(v) == 8 && int64(binary.BigEndian.Uint64(v)) > fakeNow.UnixMilli()
					liveByAge := startMillis(p.PutIntent.Txn.StartTs)+db.opts.HeartbeatTTL.Milliseconds() > fakeNow.UnixMilli()
					if !liveRecord && !liveByAge {
						uncovered.Add(1)
					}
					if ok {
						records.Add(1)
					}
				}
				return nil
			})
			err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
				return txn.Put(ctx, []byte("a"), []byte("1"))
			})
			if err != nil {
				t.Fatal(err)
			}
			if uncovered.Load() != 0 {
				t.Fatal("an intent was written while a reader could judge its transaction expired")
			}
			if young && records.Load() != 0 {
				t.Fatal("a young transaction wrote a heartbeat record before its first intent")
			}
			if !young && records.Load() == 0 {
				t.Fatal("an old transaction wrote its first intent without a heartbeat record")
			}
		})
	}
}

// A serializable transaction whose read changed before commit retries; a
// snapshot-isolation one commits.
func TestTxnRefreshConflict(t *testing.T) {
	for _, iso := range []Isolation{Serializable, SnapshotIsolation} {
		t.Run(iso.String(), func(t *testing.T) {
			c := newFakeCluster(t, 1)
			db := c.open()
			mustPut(t, db, "x", "0")
			attempts := 0
			err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
				attempts++
				if _, _, err := txn.Get(ctx, []byte("x")); err != nil {
					return err
				}
				if attempts == 1 {
					mustPut(t, db, "x", "changed")
				}
				return txn.Put(ctx, []byte("y"), []byte("1"))
			}, WithIsolation(iso))
			if err != nil {
				t.Fatal(err)
			}
			want := 2
			if iso == SnapshotIsolation {
				want = 1
			}
			if attempts != want {
				t.Fatalf("attempts = %d, want %d", attempts, want)
			}
			if st := db.Stats(); st.Retries != int64(want-1) || st.Commits != 1 {
				t.Fatalf("stats = %+v", st)
			}
			closeAndCheckClean(t, c, db)
		})
	}
}

// A phantom in a scanned span fails the serializable check.
func TestTxnScanPhantom(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	attempts := 0
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		attempts++
		if _, err := txn.Scan(ctx, []byte("k"), []byte("l"), 0); err != nil {
			return err
		}
		if attempts == 1 {
			mustPut(t, db, "k5", "phantom")
		}
		return txn.Put(ctx, []byte("z"), []byte("1"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Fatalf("attempts = %d", attempts)
	}
}

// A limited scan records only the span it read: a write after its last
// key does not conflict.
func TestTxnLimitedScanSpan(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	mustPut(t, db, "k1", "1")
	mustPut(t, db, "k2", "2")
	attempts := 0
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		attempts++
		kvs, err := txn.Scan(ctx, []byte("k"), []byte("l"), 1)
		if err != nil || len(kvs) != 1 {
			return fmt.Errorf("scan: %v %v", kvs, err)
		}
		if attempts == 1 {
			mustPut(t, db, "k3", "after the limit")
		}
		return txn.Put(ctx, []byte("z"), []byte("1"))
	})
	if err != nil || attempts != 1 {
		t.Fatalf("err %v, attempts %d", err, attempts)
	}
}

// A write over a newer committed version is a retryable conflict, and the
// transaction is poisoned: later operations return the same error.
func TestTxnWriteTooOld(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	attempts := 0
	var firstErr error
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		attempts++
		if attempts == 1 {
			mustPut(t, db, "x", "newer")
		}
		err := txn.Put(ctx, []byte("x"), []byte("mine"))
		if attempts == 1 {
			firstErr = err
			var re *RetryableError
			if !errors.As(err, &re) || re.Reason != ReasonWriteTooOld {
				t.Errorf("first attempt err = %v", err)
			}
			if _, _, err2 := txn.Get(ctx, []byte("x")); !errors.Is(err2, ErrRetryable) {
				t.Errorf("poisoned txn Get err = %v", err2)
			}
			return nil // swallowing the error must not commit
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 2 || firstErr == nil {
		t.Fatalf("attempts = %d", attempts)
	}
	if got := mustGet(t, db, "x"); got != "mine" {
		t.Fatalf("x = %q", got)
	}
	closeAndCheckClean(t, c, db)
}

// isCommitPUE reports whether req is a put-unless-exists of a committed
// status value (tickets: aborted is the empty value).
func isCommitPUE(req *rpcpb.BatchRequest) bool {
	for _, r := range req.Requests {
		if p, ok := r.Value.(*rpcpb.RequestUnion_PlainPutUnlessExists); ok &&
			bytes.HasPrefix(p.PlainPutUnlessExists.Key, keys.StatusPrefix) && len(p.PlainPutUnlessExists.Value) > 0 {
			return true
		}
	}
	return false
}

// The commit point applies but its answer is lost (AMBIGUOUS) once: the
// resend finds our own value and counts as success.
func TestAmbiguousCommitResent(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	var n atomic.Int32
	c.setAfterBatch(func(node uint64, req *rpcpb.BatchRequest, resp *rpcpb.BatchResponse) *rpcpb.BatchResponse {
		if isCommitPUE(req) && n.Add(1) == 1 {
			return errResp(rpcpb.ErrorCode_AMBIGUOUS, "leader changed")
		}
		return nil
	})
	attempts := 0
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		attempts++
		return txn.Put(ctx, []byte("a"), []byte("1"))
	})
	if err != nil || attempts != 1 {
		t.Fatalf("err %v, attempts %d", err, attempts)
	}
	closeAndCheckClean(t, c, db)
}

// Every answer to the commit point is AMBIGUOUS although it applied: the
// sender gives up, the coordinator reads the status, finds it committed,
// and returns success without running the closure again.
func TestAmbiguousCommitResolvedByLookup(t *testing.T) {
	c := newFakeCluster(t, 1)
	// The ordinary commit point (parallel commits have their own tests).
	db := c.open(func(o *Options) { o.SendAttemptsMax = 3; o.ParallelCommits = ToggleOff })
	c.setAfterBatch(func(node uint64, req *rpcpb.BatchRequest, resp *rpcpb.BatchResponse) *rpcpb.BatchResponse {
		if isCommitPUE(req) {
			return errResp(rpcpb.ErrorCode_AMBIGUOUS, "leader changed")
		}
		return nil
	})
	attempts := 0
	var start uint64
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		attempts++
		start = txn.StartTs()
		return txn.Put(ctx, []byte("a"), []byte("1"))
	})
	if err != nil || attempts != 1 {
		t.Fatalf("err %v, attempts %d", err, attempts)
	}
	if found, _, aborted := c.status(start); !found || aborted {
		t.Fatal("status not committed")
	}
	if st := db.Stats(); st.AmbiguousResolved != 1 || st.Commits != 1 {
		t.Fatalf("stats = %+v", st)
	}
	if got := mustGet(t, db, "a"); got != "1" {
		t.Fatalf("a = %q", got)
	}
	closeAndCheckClean(t, c, db)
}

// The commit point applies but its answer is lost, and the record it
// wrote is then found damaged (it does not decode): the resend, the
// lookup and the rollback's "aborted" all meet it and fail. The commit
// may have applied, so Commit returns ErrAmbiguous, never the corruption
// error as a definite failure (which said "not committed").
func TestCommitRollbackFailsAfterPointMayHaveApplied(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(func(o *Options) { o.SendAttemptsMax = 3; o.ParallelCommits = ToggleOff; o.OnePC = ToggleOff })
	damaged := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	var n atomic.Int32
	c.setAfterBatch(func(node uint64, req *rpcpb.BatchRequest, resp *rpcpb.BatchResponse) *rpcpb.BatchResponse {
		if isCommitPUE(req) && n.Add(1) == 1 {
			k := req.Requests[0].GetPlainPutUnlessExists().GetKey()
			c.mu.Lock()
			c.mu.plain[string(k)] = damaged
			c.mu.Unlock()
			return errResp(rpcpb.ErrorCode_AMBIGUOUS, "leader changed")
		}
		return nil
	})
	txn, err := db.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.decodeStatus(txn.StartTs(), damaged); err == nil {
		t.Fatal("the damaged record decodes")
	}
	if err := txn.Put(bg, []byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	err = txn.Commit(bg)
	if !errors.Is(err, ErrAmbiguous) || errors.Is(err, ErrInternal) {
		t.Fatalf("Commit = %v; want ErrAmbiguous (and not ErrInternal)", err)
	}
	if n.Load() == 0 {
		t.Fatal("the commit point was never sent")
	}
	if err := txn.Commit(bg); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "unknown outcome") {
		t.Fatalf("second Commit = %v; want the transaction of unknown outcome refused", err)
	}
}

// The commit point's answers are AMBIGUOUS and it never applied: the
// lookup finds no record, writes "aborted", and only then is the closure
// run again.
func TestAmbiguousCommitNotAppliedIsAborted(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(func(o *Options) { o.SendAttemptsMax = 3; o.ParallelCommits = ToggleOff })
	var firstStart atomic.Uint64
	c.setBeforeBatch(func(node uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
		if isCommitPUE(req) {
			p := req.Requests[0].GetPlainPutUnlessExists()
			if bytes.Equal(p.Key, keys.StatusKey(c.enc.Key(firstStart.Load()))) {
				return errResp(rpcpb.ErrorCode_AMBIGUOUS, "timeout")
			}
		}
		return nil
	})
	attempts := 0
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		attempts++
		if attempts == 1 {
			firstStart.Store(txn.StartTs())
		}
		return txn.Put(ctx, []byte("a"), fmt.Appendf(nil, "%d", attempts))
	})
	if err != nil || attempts != 2 {
		t.Fatalf("err %v, attempts %d", err, attempts)
	}
	if found, _, aborted := c.status(firstStart.Load()); !found || !aborted {
		t.Fatal("first attempt not recorded as aborted")
	}
	if got := mustGet(t, db, "a"); got != "2" {
		t.Fatalf("a = %q", got)
	}
	closeAndCheckClean(t, c, db)
}

// When the status lookup cannot complete either, the result is
// ErrAmbiguous and the closure is not rerun.
func TestAmbiguousCommitLookupFails(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(func(o *Options) { o.SendAttemptsMax = 3 })
	var committing atomic.Bool
	c.setBeforeBatch(func(node uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
		if isCommitPUE(req) {
			committing.Store(true)
		}
		if committing.Load() {
			return errResp(rpcpb.ErrorCode_AMBIGUOUS, "everything is down")
		}
		return nil
	})
	attempts := 0
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		attempts++
		return txn.Put(ctx, []byte("a"), []byte("1"))
	})
	if !errors.Is(err, ErrAmbiguous) || attempts != 1 {
		t.Fatalf("err %v, attempts %d", err, attempts)
	}
	if db.Stats().Ambiguous != 1 {
		t.Fatalf("stats = %+v", db.Stats())
	}
}

// A reader aborted us (our heartbeat "expired"): the commit point finds
// "aborted" and the transaction retries.
func TestCommitFindsAborted(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	attempts := 0
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		attempts++
		if err := txn.Put(ctx, []byte("a"), []byte("1")); err != nil {
			return err
		}
		if attempts == 1 {
			// As a reader does: fence the staging key, then abort.
			c.setPlain(db.stagingKey(txn.StartTs()), txnstatus.FenceValue())
			v, _ := c.enc.EncodeValue(txn.StartTs(), 0)
			c.setPlain(keys.StatusKey(c.enc.Key(txn.StartTs())), v)
		}
		return nil
	})
	if err != nil || attempts != 2 {
		t.Fatalf("err %v, attempts %d", err, attempts)
	}
	closeAndCheckClean(t, c, db)
}

// An intent of a pending transaction whose heartbeat expired is aborted
// (put-unless-exists "aborted") and removed; the reader sees the value
// below it.
func TestResolveExpiredPendingIntent(t *testing.T) {
	for _, reader := range []string{"txn", "single-key", "scan", "writer"} {
		t.Run(reader, func(t *testing.T) {
			c := newFakeCluster(t, 1)
			db := c.open()
			k := keys.UserKey([]byte("k"))
			c.putVersion(k, 5, []byte("old"))
			c.putIntent(k, 7, []byte("pending"))
			c.setPlain(keys.HeartbeatKey(7), heartbeatValue(fakeNow.Add(-time.Second)))
			var got string
			switch reader {
			case "txn":
				err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
					v, _, err := txn.Get(ctx, []byte("k"))
					got = string(v)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			case "single-key":
				got = mustGet(t, db, "k")
			case "scan":
				kvs, err := db.Scan(bg, nil, nil, 0)
				if err != nil || len(kvs) != 1 {
					t.Fatalf("scan %v %v", kvs, err)
				}
				got = string(kvs[0].Value)
			case "writer":
				err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
					return txn.Put(ctx, []byte("k"), []byte("new"))
				})
				if err != nil {
					t.Fatal(err)
				}
				got = "old" // checked below: the write went through
				if v := mustGet(t, db, "k"); v != "new" {
					t.Fatalf("k = %q", v)
				}
			}
			if got != "old" {
				t.Fatalf("read %q, want old", got)
			}
			if found, _, aborted := c.status(7); !found || !aborted {
				t.Fatal("expired transaction not recorded as aborted")
			}
			if reader != "writer" && c.hasIntent(k) {
				t.Fatal("aborted intent not removed")
			}
			if db.Stats().AbortedOthers != 1 {
				t.Fatalf("stats = %+v", db.Stats())
			}
		})
	}
}

// An intent whose transaction committed is resolved at its commit
// timestamp.
func TestResolveCommittedIntent(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	k := keys.UserKey([]byte("k"))
	c.putVersion(k, 5, []byte("old"))
	c.putIntent(k, 7, []byte("new"))
	v, _ := c.enc.EncodeValue(7, 9)
	c.setPlain(keys.StatusKey(c.enc.Key(7)), v)
	// No heartbeat record: the status decides before it is looked at.
	if got := mustGet(t, db, "k"); got != "new" {
		t.Fatalf("k = %q", got)
	}
	if c.hasIntent(k) {
		t.Fatal("intent left")
	}
	if db.Stats().AbortedOthers != 0 {
		t.Fatal("aborted a committed transaction")
	}
}

// An intent whose heartbeat is alive is waited for, then the reader gives
// up with a retryable error; nothing is aborted.
func TestLiveIntentIsRetryable(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(func(o *Options) { o.IntentWaitMax = 20 * time.Millisecond })
	k := keys.UserKey([]byte("k"))
	c.putIntent(k, 7, []byte("pending"))
	c.setPlain(keys.HeartbeatKey(7), heartbeatValue(fakeNow.Add(time.Hour)))
	_, _, err := db.Get(bg, []byte("k"))
	var re *RetryableError
	if !errors.As(err, &re) || re.Reason != ReasonIntentPending || re.Ts != 7 {
		t.Fatalf("err = %v", err)
	}
	if found, _, _ := c.status(7); found {
		t.Fatal("live transaction was decided")
	}
	if !c.hasIntent(k) {
		t.Fatal("live intent removed")
	}
}

func TestRollback(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	txn, err := db.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if err := txn.Put(bg, []byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := txn.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	if found, _, aborted := c.status(txn.StartTs()); !found || !aborted {
		t.Fatal("not recorded aborted")
	}
	if err := txn.Rollback(bg); err != nil {
		t.Fatal("second rollback:", err)
	}
	if err := txn.Commit(bg); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("commit after rollback: %v", err)
	}
	if got := mustGet(t, db, "a"); got != "<missing>" {
		t.Fatalf("a = %q", got)
	}
	closeAndCheckClean(t, c, db)
}

// A closure's own error rolls back and is returned as is; so is a panic.
func TestTxnClosureErrorRollsBack(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	myErr := errors.New("mine")
	var start uint64
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		start = txn.StartTs()
		if err := txn.Put(ctx, []byte("a"), []byte("1")); err != nil {
			return err
		}
		return myErr
	})
	if err != myErr {
		t.Fatalf("err = %v", err)
	}
	if _, _, aborted := c.status(start); !aborted {
		t.Fatal("not aborted")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_ = db.Txn(bg, func(ctx context.Context, txn *Txn) error {
			start = txn.StartTs()
			_ = txn.Put(ctx, []byte("b"), []byte("1"))
			panic("boom")
		})
	}()
	if _, _, aborted := c.status(start); !aborted {
		t.Fatal("not aborted after panic")
	}
	closeAndCheckClean(t, c, db)
}

// Limits are checked before sending and named in the error.
func TestLimits(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(func(o *Options) { o.TxnKeysMax = 3 })
	bigKey := make([]byte, keys.KeyBytesMax+1)
	bigValue := make([]byte, keys.ValueBytesMax+1)
	txn, err := db.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	before := c.batchCount(1)
	check := func(what string, err error, limit string, size int) {
		t.Helper()
		if !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("%s: err = %v, want ErrInvalidArgument", what, err)
		}
		if !strings.Contains(err.Error(), limit) || !strings.Contains(err.Error(), fmt.Sprint(size)) {
			t.Fatalf("%s: %q does not name %s and %d", what, err, limit, size)
		}
	}
	check("db.Put key", db.Put(bg, bigKey, nil), "KeyBytesMax", len(bigKey))
	check("db.Put value", db.Put(bg, []byte("k"), bigValue), "ValueBytesMax", len(bigValue))
	_, _, err = db.Get(bg, bigKey)
	check("db.Get", err, "KeyBytesMax", len(bigKey))
	check("db.Delete", db.Delete(bg, bigKey), "KeyBytesMax", len(bigKey))
	_, err = db.Scan(bg, bigKey, nil, 0)
	check("db.Scan", err, "KeyBytesMax", len(bigKey))
	check("txn.Put key", txn.Put(bg, bigKey, nil), "KeyBytesMax", len(bigKey))
	check("txn.Put value", txn.Put(bg, []byte("k"), bigValue), "ValueBytesMax", len(bigValue))
	_, _, err = txn.Get(bg, bigKey)
	check("txn.Get", err, "KeyBytesMax", len(bigKey))
	check("db.Split", db.Split(bg, bigKey), "KeyBytesMax", len(bigKey))
	if c.batchCount(1) != before {
		t.Fatal("an invalid request was sent")
	}
	for i := range 3 {
		if err := txn.Put(bg, fmt.Appendf(nil, "k%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := txn.Put(bg, []byte("k0"), []byte("rewrite is fine")); err != nil {
		t.Fatal(err)
	}
	check("txn.Put 4th key", txn.Put(bg, []byte("k3"), nil), "TxnKeysMax=3", 4)
	if err := txn.Commit(bg); err != nil {
		t.Fatal(err)
	}
	_, err = db.Scan(bg, nil, nil, 100_001)
	check("scan limit", err, "ScanKeysMax", 100_001)
}

// Concurrent transfers between accounts keep the total (serializable,
// with conflicts, waits and retries).
func TestConcurrentTransfers(t *testing.T) {
	runTransfers(t, newFakeCluster(t, 3))
}

// runTransfers runs concurrent transfers on c with a client whose options
// mod adjusts, and checks the total.
func runTransfers(t *testing.T, c *fakeCluster, mod ...func(*Options)) {
	db := c.open(append([]func(*Options){func(o *Options) {
		o.TxnAttemptsMax = 1000
		o.IntentWaitMax = 50 * time.Millisecond
	}}, mod...)...)
	const accounts, workers, transfers = 8, 8, 15
	key := func(i int) []byte { return fmt.Appendf(nil, "acct%02d", i) }
	for i := range accounts {
		mustPut(t, db, string(key(i)), "100")
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range transfers {
				from, to := (w+n)%accounts, (w*3+n+1)%accounts
				if from == to {
					continue
				}
				err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
					var bal [2]int
					for j, a := range []int{from, to} {
						v, _, err := txn.Get(ctx, key(a))
						if err != nil {
							return err
						}
						fmt.Sscan(string(v), &bal[j])
					}
					if err := txn.Put(ctx, key(from), fmt.Append(nil, bal[0]-1)); err != nil {
						return err
					}
					return txn.Put(ctx, key(to), fmt.Append(nil, bal[1]+1))
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	kvs, err := db.Scan(bg, []byte("acct"), []byte("acct~"), 0)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, kv := range kvs {
		var b int
		fmt.Sscan(string(kv.Value), &b)
		total += b
	}
	if len(kvs) != accounts || total != accounts*100 {
		t.Fatalf("%d accounts, total %d, want %d", len(kvs), total, accounts*100)
	}
	t.Logf("stats: %+v", db.Stats())
	closeAndCheckClean(t, c, db)
}
