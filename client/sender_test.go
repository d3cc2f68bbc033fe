package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

func mustPut(t *testing.T, db *DB, k, v string) {
	t.Helper()
	if err := db.Put(context.Background(), []byte(k), []byte(v)); err != nil {
		t.Fatalf("put %q: %v", k, err)
	}
}

func mustGet(t *testing.T, db *DB, k string) string {
	t.Helper()
	v, ok, err := db.Get(context.Background(), []byte(k))
	if err != nil {
		t.Fatalf("get %q: %v", k, err)
	}
	if !ok {
		return "<missing>"
	}
	return string(v)
}

// A lease that moved is found through the NOT_LEASEHOLDER hint, once: the
// hint is cached for the next request.
func TestRoutingFollowsLeaseholderHint(t *testing.T) {
	c := newFakeCluster(t, 3)
	db := c.open()
	mustPut(t, db, "a", "1")
	user := c.rangeOf(keys.UserKey([]byte("a")))
	c.setLeaseholder(user.RangeId, 3)
	if got := mustGet(t, db, "a"); got != "1" {
		t.Fatalf("get = %q", got)
	}
	if got := c.errCount(rpcpb.ErrorCode_NOT_LEASEHOLDER); got != 1 {
		t.Fatalf("NOT_LEASEHOLDER answers = %d, want 1", got)
	}
	before := c.batchCount(3)
	mustPut(t, db, "b", "2")
	if c.errCount(rpcpb.ErrorCode_NOT_LEASEHOLDER) != 1 || c.batchCount(3) != before+1 {
		t.Fatalf("second request did not go straight to node 3")
	}
}

// Without a hint, the client tries the other replicas.
func TestRoutingWithoutHintTriesReplicas(t *testing.T) {
	c := newFakeCluster(t, 3)
	db := c.open()
	mustPut(t, db, "a", "1")
	c.setHideHints(true)
	c.setAllLeaseholders(3)
	if got := mustGet(t, db, "a"); got != "1" {
		t.Fatalf("get = %q", got)
	}
	if c.errCount(rpcpb.ErrorCode_NOT_LEASEHOLDER) == 0 {
		t.Fatal("expected NOT_LEASEHOLDER answers")
	}
}

// A split makes the cached descriptor stale: RANGE_KEY_MISMATCH carries
// the new one, and requests and scans follow.
func TestRoutingAfterSplit(t *testing.T) {
	c := newFakeCluster(t, 3)
	db := c.open()
	for ch := 'a'; ch <= 'z'; ch++ {
		mustPut(t, db, string(ch), strings.ToUpper(string(ch)))
	}
	c.split(keys.UserKey([]byte("m")))
	c.split(keys.UserKey([]byte("t")))
	if got := mustGet(t, db, "x"); got != "X" {
		t.Fatalf("get x = %q", got)
	}
	if c.errCount(rpcpb.ErrorCode_RANGE_KEY_MISMATCH) == 0 {
		t.Fatal("expected RANGE_KEY_MISMATCH")
	}
	kvs, err := db.Scan(context.Background(), nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != 26 {
		t.Fatalf("scan returned %d keys, want 26", len(kvs))
	}
	for i, kv := range kvs {
		if want := string(rune('a' + i)); string(kv.Key) != want {
			t.Fatalf("scan key %d = %q, want %q", i, kv.Key, want)
		}
	}
	// A limit across ranges.
	kvs, err = db.Scan(context.Background(), []byte("k"), []byte("v"), 5)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range kvs {
		got = append(got, string(kv.Key))
	}
	if strings.Join(got, "") != "klmno" {
		t.Fatalf("limited scan = %v", got)
	}
}

// A batch over keys of several ranges is split per range.
func TestSendPointsSplitsPerRange(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	c.split(keys.UserKey([]byte("m")))
	var reqs []*rpcpb.RequestUnion
	for _, k := range []string{"a", "z", "b", "y"} {
		reqs = append(reqs, &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Put{Put: &rpcpb.PutRequest{Key: keys.UserKey([]byte(k)), Value: []byte(k)}}})
	}
	before := c.batchCount(1)
	if _, err := db.sender.sendPoints(context.Background(), true, reqs); err != nil {
		t.Fatal(err)
	}
	// Two ranges: two batches (the stale cache may add one mismatch round).
	if n := c.batchCount(1) - before; n < 2 || n > 3 {
		t.Fatalf("batches = %d, want 2 (or 3 with a mismatch)", n)
	}
	for _, k := range []string{"a", "z", "b", "y"} {
		if got := mustGet(t, db, k); got != k {
			t.Fatalf("get %q = %q", k, got)
		}
	}
}

// A node that is down is skipped.
func TestRoutingSkipsDeadNode(t *testing.T) {
	c := newFakeCluster(t, 3)
	db := c.open()
	mustPut(t, db, "a", "1") // caches node 1 as leaseholder
	c.setAllLeaseholders(2)
	c.stopNode(1)
	if got := mustGet(t, db, "a"); got != "1" {
		t.Fatalf("get = %q", got)
	}
	if _, err := db.Timestamp(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A leaseholder whose reply was lost (a transport error, not silence) is
// tried again once the other replicas name it: before, the call went round
// the followers, each answering NOT_LEASEHOLDER with it as the hint, until
// it ran out of attempts (the stalls after a lost commit reply in
// docs/RELIABILITY.md).
func TestRoutingReturnsToLeaseholderAfterLostReply(t *testing.T) {
	c := newFakeCluster(t, 3)
	db := c.open(func(o *Options) { o.SendAttemptsMax = 8 })
	mustPut(t, db, "a", "1")
	c.setAllLeaseholders(1)
	var lost atomic.Bool
	c.setAfterBatch(func(node uint64, req *rpcpb.BatchRequest, resp *rpcpb.BatchResponse) *rpcpb.BatchResponse {
		if node == 1 && resp.Error == nil && lost.CompareAndSwap(false, true) {
			return lostReply
		}
		return nil
	})
	if got := mustGet(t, db, "a"); got != "1" {
		t.Fatalf("get = %q", got)
	}
	if !lost.Load() {
		t.Fatal("no reply was lost")
	}
}

// A leaseholder that answers nothing (stopped with SIGSTOP) is given up
// after a health probe goes unanswered, not after RPCTimeout: the read is
// served by the new leaseholder, and the next requests go straight there
// (the silent node is a suspect) instead of each waiting for its own
// probe. Once the node answers again, it is no longer a suspect.
func TestRoutingGivesUpSilentNode(t *testing.T) {
	c := newFakeCluster(t, 3)
	db := c.open(func(o *Options) {
		o.RPCTimeout = time.Minute // the test would time out, not fail, without the probe
		o.ProbeAfter, o.ProbeTimeout = 50*time.Millisecond, 100*time.Millisecond
	})
	mustPut(t, db, "a", "1") // caches node 1 as leaseholder
	thaw := c.freezeNode(1)
	c.setAllLeaseholders(2)
	if got := mustGet(t, db, "a"); got != "1" {
		t.Fatalf("get = %q", got)
	}
	if !db.sender.suspects.has(1) {
		t.Fatal("node 1 is not a suspect after its probe went unanswered")
	}
	for i := 0; i < 5; i++ {
		mustPut(t, db, "b", fmt.Sprint(i))
	}
	thaw()
	deadline := time.Now().Add(30 * time.Second)
	for db.sender.suspects.has(1) {
		if time.Now().After(deadline) {
			t.Fatal("node 1 is still a suspect 30 s after it answers again")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An attempt waiting on a node that another request then finds silent
// (it becomes a suspect) ends at once, as silent, and the request goes to
// the range's other replicas: it does not wait for its own probe (here
// never: ProbeAfter is an hour) or its RPCTimeout.
func TestSuspectEndsAttemptsInFlight(t *testing.T) {
	c := newFakeCluster(t, 3)
	db := c.open(func(o *Options) {
		o.RPCTimeout = 10 * time.Minute
		o.ProbeAfter, o.ProbeTimeout = time.Hour, 100*time.Millisecond
	})
	mustPut(t, db, "a", "1") // caches node 1 as leaseholder
	thaw := c.freezeNode(1)
	defer thaw()
	c.setAllLeaseholders(2)
	got := make(chan string, 1)
	go func() {
		v, _, err := db.Get(bg, []byte("a"))
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(v)
	}()
	// Wait until the attempt waits at node 1.
	deadline := time.Now().Add(30 * time.Second)
	for c.nodes[0].frozenWaits.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no attempt on node 1 after 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	addr, _ := db.nodes.address(1)
	db.sender.suspect(1, addr) // as another request's probe would
	select {
	case v := <-got:
		if v != "1" {
			t.Fatalf("get = %q", v)
		}
	case <-time.After(time.Minute):
		t.Fatal("the attempt on node 1 still waits a minute after node 1 became a suspect")
	}
}

// UNAVAILABLE is retried with backoff.
func TestRoutingRetriesUnavailable(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	var n atomic.Int32
	c.setBeforeBatch(func(node uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
		if n.Add(1) <= 3 {
			return errResp(rpcpb.ErrorCode_UNAVAILABLE, "no quorum")
		}
		return nil
	})
	mustPut(t, db, "a", "1")
	if got := c.errCount(rpcpb.ErrorCode_UNAVAILABLE); got != 3 {
		t.Fatalf("UNAVAILABLE answers = %d", got)
	}
}

// Running out of attempts on a read gives ErrUnavailable.
func TestRoutingGivesUpUnavailable(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(func(o *Options) { o.SendAttemptsMax = 3 })
	c.setBeforeBatch(func(uint64, *rpcpb.BatchRequest) *rpcpb.BatchResponse {
		return errResp(rpcpb.ErrorCode_UNAVAILABLE, "no quorum")
	})
	_, _, err := db.Get(context.Background(), []byte("a"))
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrAmbiguous) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

// A Put whose attempt may have applied (here: applied, then answered
// AMBIGUOUS) is not resent but returns ErrAmbiguous. The leaseholder gives
// every application of a Put a fresh timestamp, so a resend is a second
// write: if another client saw the first one and overwrote it, the resend
// would bring the old value back, and one Put call whose effect appears
// twice, on both sides of another write, is not linearizable. (Found by
// testcluster's TestLinearizableSingleKeyOps: a Delete whose leaseholder
// was stopped applied once on the new leader, and again when resent.)
func TestAmbiguousPutIsNotResent(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(func(o *Options) { o.SendAttemptsMax = 4 })
	other := c.open()
	var first atomic.Bool
	c.setAfterBatch(func(node uint64, req *rpcpb.BatchRequest, resp *rpcpb.BatchResponse) *rpcpb.BatchResponse {
		p, ok := req.Requests[0].Value.(*rpcpb.RequestUnion_Put)
		if !ok || string(p.Put.Value) != "a" || !first.CompareAndSwap(false, true) {
			return nil
		}
		// Applied. Before the answer, another client sees the value and
		// overwrites it.
		ctx := context.Background()
		if v, _, err := other.Get(ctx, []byte("k")); err != nil || string(v) != "a" {
			t.Errorf("other client read %q, %v; want \"a\"", v, err)
		}
		if err := other.Put(ctx, []byte("k"), []byte("b")); err != nil {
			t.Errorf("other client's put: %v", err)
		}
		return errResp(rpcpb.ErrorCode_AMBIGUOUS, "leader changed")
	})
	err := db.Put(context.Background(), []byte("k"), []byte("a"))
	if !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("err = %v, want ErrAmbiguous", err)
	}
	if got := mustGet(t, other, "k"); got != "b" {
		t.Fatalf("k = %q after the ambiguous Put returned, want \"b\": the Put was applied again after another client's overwrite", got)
	}
	if db.Stats().Ambiguous != 1 {
		t.Fatalf("stats = %+v", db.Stats())
	}
}

// Server error codes map to typed errors.
func TestServerErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		code rpcpb.ErrorCode
		want error
	}{
		{rpcpb.ErrorCode_INVALID_ARGUMENT, ErrInvalidArgument},
		{rpcpb.ErrorCode_INTERNAL, ErrInternal},
		{rpcpb.ErrorCode_WRITE_CONFLICT, ErrRetryable},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			c := newFakeCluster(t, 1)
			db := c.open()
			c.setBeforeBatch(func(uint64, *rpcpb.BatchRequest) *rpcpb.BatchResponse {
				return errResp(tc.code, "from the server")
			})
			err := db.Put(context.Background(), []byte("a"), []byte("1"))
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), "from the server") {
				t.Fatalf("err %q lost the server's message", err)
			}
		})
	}
}

func TestRangeCacheInsertEvicts(t *testing.T) {
	rc := newRangeCache()
	d := func(id uint64, s, e string, gen uint64) *rpcpb.RangeDescriptor {
		return &rpcpb.RangeDescriptor{RangeId: id, StartKey: []byte(s), EndKey: []byte(e), Generation: gen}
	}
	rc.insert(d(1, "a", "z", 1), 0)
	if e := rc.lookup([]byte("m")); e == nil || e.desc.RangeId != 1 {
		t.Fatal("lookup m")
	}
	rc.insert(d(1, "a", "m", 2), 0)
	rc.insert(d(2, "m", "z", 1), 0)
	if rc.len() != 2 {
		t.Fatalf("len = %d", rc.len())
	}
	if e := rc.lookup([]byte("n")); e == nil || e.desc.RangeId != 2 {
		t.Fatal("lookup n")
	}
	// A stale lookup result (older generation of range 1) is ignored.
	rc.insert(d(1, "a", "z", 1), 0)
	if e := rc.lookup([]byte("n")); e == nil || e.desc.RangeId != 2 {
		t.Fatal("stale insert replaced a newer descriptor")
	}
	if rc.lookup([]byte("z")) != nil || rc.lookup([]byte("0")) != nil {
		t.Fatal("lookup outside cached ranges")
	}
	rc.evictKey([]byte("b"))
	if rc.lookup([]byte("b")) != nil || rc.len() != 1 {
		t.Fatal("evict")
	}
	_ = fmt.Sprint()
}

// Whatever the server answers, every public call returns nil or an error
// of one of the documented classes.
func TestErrorsAreTyped(t *testing.T) {
	c := newFakeCluster(t, 2)
	db := c.open(func(o *Options) { o.SendAttemptsMax = 3; o.IntentWaitMax = time.Millisecond })
	codes := []rpcpb.ErrorCode{}
	for code := range rpcpb.ErrorCode_name {
		codes = append(codes, rpcpb.ErrorCode(code))
	}
	var n atomic.Int64
	c.setBeforeBatch(func(node uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
		i := n.Add(1)
		if i%2 == 0 {
			return nil // let half through, so that calls get further
		}
		e := &rpcpb.Error{Code: codes[int(i/2)%len(codes)], Message: "injected"}
		if e.Code == rpcpb.ErrorCode_INTENT_FOUND || e.Code == rpcpb.ErrorCode_WRITE_CONFLICT || e.Code == rpcpb.ErrorCode_READ_CONFLICT {
			e.Intents = []*rpcpb.Intent{{Key: keys.UserKey([]byte("q")), Txn: &rpcpb.TxnMeta{StartTs: 3}}}
		}
		return &rpcpb.BatchResponse{Error: e}
	})
	typed := func(err error) bool {
		for _, class := range []error{ErrInvalidArgument, ErrRetryable, ErrAmbiguous, ErrUnavailable, ErrInternal} {
			if errors.Is(err, class) {
				return true
			}
		}
		return false
	}
	ctx := context.Background()
	for i := range 40 {
		var errs []error
		_, _, err := db.Get(ctx, []byte("a"))
		errs = append(errs, err, db.Put(ctx, []byte("a"), []byte("1")), db.Delete(ctx, []byte("a")))
		_, err = db.Scan(ctx, nil, nil, 0)
		errs = append(errs, err)
		errs = append(errs, db.Txn(ctx, func(ctx context.Context, txn *Txn) error {
			if _, _, err := txn.Get(ctx, []byte("b")); err != nil {
				return err
			}
			if _, err := txn.Scan(ctx, nil, nil, 10); err != nil {
				return err
			}
			return txn.Put(ctx, []byte("b"), []byte("2"))
		}, WithAttemptsMax(2)))
		for j, err := range errs {
			if err != nil && !typed(err) {
				t.Fatalf("round %d call %d: untyped error %v", i, j, err)
			}
		}
	}
}

// A Put whose attempt the health probe cancelled after it applied is not
// resent: the probe's "no answer" does not replace the call's own
// ErrAmbiguous (see TestAmbiguousPutIsNotResent for why a resend is a
// second write).
func TestPutCancelledByProbeIsNotResent(t *testing.T) {
	c := newFakeCluster(t, 3)
	c.setAllLeaseholders(1)
	db := c.open(func(o *Options) {
		o.RPCTimeout = time.Minute
		o.ProbeAfter, o.ProbeTimeout = 50*time.Millisecond, 100*time.Millisecond
		o.SendAttemptsMax = 5
	})
	puts, release := c.freezeAfterApply(func(_ uint64, req *rpcpb.BatchRequest) bool {
		_, ok := req.Requests[0].Value.(*rpcpb.RequestUnion_Put)
		return ok
	})
	err := db.Put(context.Background(), []byte("k"), []byte("a"))
	release()
	if !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("err = %v, want ErrAmbiguous", err)
	}
	if n := puts.Load(); n != 1 {
		t.Fatalf("the Put applied %d times, want once", n)
	}
}

// A write batch whose attempt may have applied (its reply was lost), and
// whose range then split between its keys, is regrouped and resent; if
// the resends then run out of attempts, the result is ErrAmbiguous, not
// ErrUnavailable ("nothing was written"): the regrouped batches' routing
// loops do not know of the first attempt themselves.
func TestRegroupedWriteStaysAmbiguous(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(func(o *Options) { o.SendAttemptsMax = 4 })
	ka, kb := keys.UserKey([]byte("a")), keys.UserKey([]byte("b"))
	var split atomic.Bool
	isPut := func(req *rpcpb.BatchRequest) bool { return req.Requests[0].GetPlainPut() != nil }
	c.setAfterBatch(func(node uint64, req *rpcpb.BatchRequest, resp *rpcpb.BatchResponse) *rpcpb.BatchResponse {
		if !isPut(req) || len(req.Requests) != 2 || resp.GetError() != nil || !split.CompareAndSwap(false, true) {
			return nil
		}
		// Applied; the reply is lost, and the range splits between a and b.
		c.split(kb)
		return lostReply
	})
	c.setBeforeBatch(func(node uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
		if split.Load() && isPut(req) && len(req.Requests) == 1 {
			// The regrouped batches (the stale one is refused as
			// RANGE_KEY_MISMATCH).
			return errResp(rpcpb.ErrorCode_UNAVAILABLE, "fake: no quorum")
		}
		return nil
	})
	_, err := db.sender.sendPoints(bg, true, []*rpcpb.RequestUnion{
		{Value: &rpcpb.RequestUnion_PlainPut{PlainPut: &rpcpb.PlainPutRequest{Key: ka, Value: []byte("1")}}},
		{Value: &rpcpb.RequestUnion_PlainPut{PlainPut: &rpcpb.PlainPutRequest{Key: kb, Value: []byte("2")}}},
	})
	if !split.Load() {
		t.Fatal("the batch never applied")
	}
	if !errors.Is(err, ErrAmbiguous) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrAmbiguous (and not ErrUnavailable)", err)
	}
}
