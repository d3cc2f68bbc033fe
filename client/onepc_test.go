package client

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

func isOnePC(req *rpcpb.BatchRequest) bool {
	return len(req.Requests) == 1 && req.Requests[0].GetCommitOnePc() != nil
}

// I1 for one-phase commits: the CommitOnePC applies but its answer is lost
// (AMBIGUOUS). The client settles it at the range (QueryOnePC finds the
// 1PC record): committed, the closure not run again, and nothing written in
// the status table (no "aborted" for a batch that applied).
func TestOnePCAmbiguousApplied(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(func(o *Options) { o.SendAttemptsMax = 3 })
	c.setAfterBatch(func(node uint64, req *rpcpb.BatchRequest, resp *rpcpb.BatchResponse) *rpcpb.BatchResponse {
		if isOnePC(req) {
			return errResp(rpcpb.ErrorCode_AMBIGUOUS, "leader changed")
		}
		return nil
	})
	attempts := 0
	var start uint64
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		attempts++
		start = txn.StartTs()
		return txn.CommitWith(ctx, Write{Key: []byte("a"), Value: []byte("1")}, Write{Key: []byte("b"), Value: []byte("2")})
	})
	if err != nil || attempts != 1 {
		t.Fatalf("err %v, attempts %d", err, attempts)
	}
	if found, _, _ := c.status(start); found {
		t.Fatal("a one-phase commit wrote the status table")
	}
	if st := db.Stats(); st.AmbiguousResolved != 1 || st.OnePCCommits != 1 {
		t.Fatalf("stats = %+v", st)
	}
	if got := mustGet(t, db, "b"); got != "2" {
		t.Fatalf("b = %q", got)
	}
}

// The CommitOnePC's answer is lost and it never applied: QueryOnePC
// refuses it for good (a late copy cannot apply), the attempt aborts
// without any status write, and the closure runs again.
func TestOnePCAmbiguousNotApplied(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(func(o *Options) { o.SendAttemptsMax = 3 })
	var lost atomic.Bool
	var late *rpcpb.BatchRequest
	c.setBeforeBatch(func(node uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
		if isOnePC(req) && !lost.Swap(true) {
			late = req
			return errResp(rpcpb.ErrorCode_AMBIGUOUS, "proposal dropped")
		}
		return nil
	})
	attempts := 0
	var first uint64
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		attempts++
		if attempts == 1 {
			first = txn.StartTs()
		}
		return txn.CommitWith(ctx, Write{Key: []byte("a"), Value: []byte("x")})
	})
	if err != nil || attempts != 2 {
		t.Fatalf("err %v, attempts %d", err, attempts)
	}
	if found, _, _ := c.status(first); found {
		t.Fatal("a one-phase commit wrote the status table")
	}
	// The first attempt's batch arrives late: refused.
	c.setBeforeBatch(nil)
	_, err = db.sender.sendOne(bg, true, late.Requests[0])
	if err == nil {
		t.Fatal("the late one-phase commit applied after it was settled as not applied")
	}
	if got := mustGet(t, db, "a"); got != "x" {
		t.Fatalf("a = %q", got)
	}
}

// I1 for a one-phase commit whose attempt the health probe cancels: the
// CommitOnePC applied at node 1, which then stopped answering (SIGSTOP),
// and the lease moved to node 2, which cannot serve a resend (here: it
// answers UNAVAILABLE). The cancelled attempt may have applied, so it
// ends the routing loop as ambiguous and is settled at the range
// (QueryOnePC): committed. Before, the probe's verdict replaced the
// one-phase commit's own ErrAmbiguous with a plain transport error; the
// routing loop (write=false: the call reports ambiguity itself) resent
// the commit, ran out of attempts and returned ErrUnavailable, "did not
// commit", for a transaction whose writes were visible (G1a, found by
// TestListAppendSwitches/all-on).
func TestOnePCCancelledByProbeIsSettled(t *testing.T) {
	c := newFakeCluster(t, 3)
	c.setAllLeaseholders(1)
	db := c.open(func(o *Options) {
		o.RPCTimeout = time.Minute // the probe, not the timeout, ends the attempt
		o.ProbeAfter, o.ProbeTimeout = 50*time.Millisecond, 100*time.Millisecond
		o.SendAttemptsMax = 5
	})
	// Applied at node 1; node 1 then answers nothing, and node 2 takes
	// the lease.
	applied, release := c.freezeAfterApply(func(node uint64, req *rpcpb.BatchRequest) bool { return node == 1 && isOnePC(req) })
	c.setBeforeBatch(func(node uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
		if node != 1 && isOnePC(req) {
			return errResp(rpcpb.ErrorCode_UNAVAILABLE, "fake: no quorum for a resend")
		}
		return nil
	})
	attempts := 0
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		attempts++
		return txn.CommitWith(ctx, Write{Key: []byte("a"), Value: []byte("1")})
	})
	release()
	if applied.Load() == 0 {
		t.Fatal("the one-phase commit never applied")
	}
	if err != nil || attempts != 1 {
		t.Fatalf("err %v, attempts %d; want the applied one-phase commit settled as committed", err, attempts)
	}
	if st := db.Stats(); st.AmbiguousResolved != 1 || st.OnePCCommits != 1 {
		t.Fatalf("stats = %+v", st)
	}
}

// writesOf returns the user keys of req's PutIntents.
func writesOf(req *rpcpb.BatchRequest) []string {
	var out []string
	for _, r := range req.Requests {
		if p := r.GetPutIntent(); p != nil {
			out = append(out, string(p.GetKey()))
		}
	}
	return out
}

// CommitWith whose writes do not fit one range writes them all at once,
// then commits: the write of "a" is held at the server until the write of
// "z" (another range) has arrived, which only happens if the second is not
// sent after the first returns.
func TestCommitWithWritesConcurrently(t *testing.T) {
	c := newFakeCluster(t, 1)
	c.split(keys.UserKey([]byte("m")))
	db := c.open(func(*Options) {}) // "a" and "z" lie in two ranges: no one-phase commit
	zArrived := make(chan struct{})
	var once sync.Once
	var heldA, gaveUp atomic.Bool
	c.setBeforeBatch(func(node uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
		for _, k := range writesOf(req) {
			switch k {
			case string(keys.UserKey([]byte("z"))):
				once.Do(func() { close(zArrived) })
			case string(keys.UserKey([]byte("a"))):
				if gaveUp.Load() {
					break // a sequential client's retry: let it through
				}
				select {
				case <-zArrived:
					heldA.Store(true)
				case <-time.After(10 * time.Second):
					// Reported below; the bound only keeps a wrong
					// (sequential) client from hanging the test, and
					// it waits once.
					gaveUp.Store(true)
				}
			}
		}
		return nil
	})
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		return txn.CommitWith(ctx, Write{Key: []byte("a"), Value: []byte("1")}, Write{Key: []byte("z"), Value: []byte("2")})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !heldA.Load() {
		t.Fatal(`the write of "a" was not in flight when the write of "z" arrived: CommitWith wrote them one after the other`)
	}
	if a, z := mustGet(t, db, "a"), mustGet(t, db, "z"); a != "1" || z != "2" {
		t.Fatalf("a = %q, z = %q", a, z)
	}
}

// One of CommitWith's concurrent writes meets a conflict: the attempt
// fails with the retryable error (not the other write's success), and the
// transaction runs again and commits.
func TestCommitWithConcurrentWriteConflict(t *testing.T) {
	c := newFakeCluster(t, 1)
	c.split(keys.UserKey([]byte("m")))
	db := c.open(func(*Options) {}) // "a" and "z" lie in two ranges: no one-phase commit
	var refused atomic.Bool
	c.setBeforeBatch(func(node uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
		for _, k := range writesOf(req) {
			if k == string(keys.UserKey([]byte("z"))) && !refused.Swap(true) {
				return &rpcpb.BatchResponse{Error: &rpcpb.Error{Code: rpcpb.ErrorCode_WRITE_CONFLICT, ExistingTs: 1 << 62}}
			}
		}
		return nil
	})
	attempts := 0
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		attempts++
		return txn.CommitWith(ctx, Write{Key: []byte("a"), Value: []byte("1")}, Write{Key: []byte("z"), Value: []byte("2")})
	})
	if err != nil || attempts != 2 {
		t.Fatalf("err %v, attempts %d (want nil, 2)", err, attempts)
	}
	if a, z := mustGet(t, db, "a"), mustGet(t, db, "z"); a != "1" || z != "2" {
		t.Fatalf("a = %q, z = %q", a, z)
	}
}
