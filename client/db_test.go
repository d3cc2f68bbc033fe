package client

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
)

func TestOpenUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	o := testOptions()
	o.SendAttemptsMax = 3
	_, err = Open(context.Background(), []string{addr}, WithOptions(o))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if _, err := Open(context.Background(), nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("no addresses: %v", err)
	}
}

// Open with one address learns the others from ClusterInfo.
func TestOpenLearnsNodes(t *testing.T) {
	c := newFakeCluster(t, 3)
	o := testOptions()
	db, err := Open(context.Background(), c.addrs()[:1], WithOptions(o))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n := db.nodes.addressCount(); n != 3 {
		t.Fatalf("known addresses = %d", n)
	}
	if db.enc.Name() != "tickets" {
		t.Fatalf("encoding %s", db.enc.Name())
	}
	c.stopNode(1)
	c.setAllLeaseholders(2)
	mustPut(t, db, "a", "1")
}

func TestSplitAndRanges(t *testing.T) {
	c := newFakeCluster(t, 3)
	db := c.open()
	ctx := context.Background()
	mustPut(t, db, "a", "1")
	if err := db.Split(ctx, []byte("m")); err != nil {
		t.Fatal(err)
	}
	rs, err := db.Ranges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 5 {
		t.Fatalf("%d ranges, want 5", len(rs))
	}
	if got := rs[4].Desc.StartKey; string(got) != string(keys.UserKey([]byte("m"))) {
		t.Fatalf("last range starts at %q", got)
	}
	if rs[4].LeaseholderNodeID != 1 {
		t.Fatalf("leaseholder %d", rs[4].LeaseholderNodeID)
	}
	mustPut(t, db, "z", "2")
	if got := mustGet(t, db, "a"); got != "1" {
		t.Fatalf("a = %q", got)
	}
	st, err := db.NodeStatus(ctx, c.nodes[1].addr)
	if err != nil || st.NodeId != 2 {
		t.Fatalf("node status %v %v", st, err)
	}
	info, err := db.ClusterInfo(ctx)
	if err != nil || len(info.Nodes) != 3 {
		t.Fatalf("cluster info %v %v", info, err)
	}
}

// Two transactions that wait for each other (a deadlock): the younger
// gives up after its short budget, the older proceeds once the younger
// rolled back.
func TestDeadlockYoungerGivesUp(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(func(o *Options) {
		o.IntentWaitMax = time.Hour    // the older waits as long as it takes
		o.IntentWoundAfter = time.Hour // and wounds no one (TestOlderWoundsYounger)
		o.IntentWaitYoungerMax = time.Millisecond
	})
	ctx := context.Background()
	t1, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t2, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := t1.Put(ctx, []byte("x"), []byte("t1")); err != nil {
		t.Fatal(err)
	}
	if err := t2.Put(ctx, []byte("y"), []byte("t2")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- t1.Put(ctx, []byte("y"), []byte("t1")) }()
	err = t2.Put(ctx, []byte("x"), []byte("t2"))
	var re *RetryableError
	if !errors.As(err, &re) || re.Reason != ReasonIntentPending {
		t.Fatalf("younger: err = %v", err)
	}
	if err := t2.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("older: %v", err)
	}
	if err := t1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, db, "y"); got != "t1" {
		t.Fatalf("y = %q", got)
	}
}

func TestHeartbeatValue(t *testing.T) {
	v := heartbeatValue(fakeNow)
	if len(v) != 8 || int64(binary.BigEndian.Uint64(v)) != fakeNow.UnixMilli() {
		t.Fatalf("value %x", v)
	}
	for _, tc := range []struct {
		now  time.Time
		want bool
	}{{fakeNow.Add(-time.Millisecond), false}, {fakeNow, true}, {fakeNow.Add(time.Second), true}} {
		got, err := heartbeatExpired(v, tc.now)
		if err != nil || got != tc.want {
			t.Fatalf("expired at %v = %v %v", tc.now, got, err)
		}
	}
}

// FuzzHeartbeatExpired: the decoder of heartbeat records read from the
// network never panics and accepts exactly 8 bytes.
func FuzzHeartbeatExpired(f *testing.F) {
	f.Add([]byte{}, int64(0))
	f.Add(heartbeatValue(fakeNow), fakeNow.UnixMilli())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, int64(1))
	f.Fuzz(func(t *testing.T, v []byte, nowMs int64) {
		_, err := heartbeatExpired(v, time.UnixMilli(nowMs))
		if (err == nil) != (len(v) == 8) {
			t.Fatalf("len %d: err %v", len(v), err)
		}
		if err != nil && !errors.Is(err, ErrInternal) {
			t.Fatalf("untyped error %v", err)
		}
	})
}

// An older transaction that meets a younger live one's intent aborts it
// after IntentWoundAfter (wound-wait) and goes on; the younger one finds
// itself aborted at its commit and retries.
func TestOlderWoundsYounger(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open(func(o *Options) {
		o.IntentWaitMax = time.Hour // only the wound can end the wait
		o.IntentWoundAfter = time.Millisecond
	})
	ctx := context.Background()
	older, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	younger, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if younger.StartTs() <= older.StartTs() {
		t.Fatalf("start timestamps %d, %d out of order", older.StartTs(), younger.StartTs())
	}
	if err := younger.Put(ctx, []byte("y"), []byte("younger")); err != nil {
		t.Fatal(err)
	}
	if err := older.Put(ctx, []byte("y"), []byte("older")); err != nil {
		t.Fatalf("older: %v", err)
	}
	if err := older.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Retryable: its status says aborted, or (pipelining) its write's
	// proof finds the intent already resolved away.
	if err := younger.Commit(ctx); !errors.Is(err, ErrRetryable) {
		t.Fatalf("younger's commit: %v, want a retryable error", err)
	}
	if got := mustGet(t, db, "y"); got != "older" {
		t.Fatalf("y = %q", got)
	}
	if s := db.Stats(); s.Wounded != 1 || s.AbortedOthers != 0 {
		t.Fatalf("wounded %d, aborted others %d; want 1, 0", s.Wounded, s.AbortedOthers)
	}
}
