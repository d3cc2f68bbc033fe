package etcdapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/etcdapi"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// op is one write of the history: what a writer was told.
type op struct {
	key   string
	del   bool
	rev   int64
	acked bool
	// client is the writer's index; at when its reply came, since the
	// test's start (for the report of a change never delivered).
	client int
	at     time.Duration
	member uint64 // the node whose etcd API answered
}

// Watches see every committed write exactly once, in revision order,
// across a leaseholder's stop and restart: the stream of each watcher is
// compared with the history the writers were told (acknowledged writes
// must all be there; a write whose request failed may or may not be).
func TestWatchMatchesHistoryAcrossLeaseholderRestart(t *testing.T) {
	c, cli := startCluster(t, 3)
	// Longer than testCtx: a watcher with prev_kv reads the previous
	// values its batch does not hold (watchSession.prevKVs), which on a
	// loaded machine may take minutes for the thousands of writes below;
	// the waits below are for progress.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	begin := time.Now()
	first := must(cli.Put(ctx, "w/start", "0"))(t)
	// Two watchers: from a past revision (catch-up, then live), and with
	// prev_kv and a filter.
	w1 := cli.Watch(ctx, "w/", clientv3.WithPrefix(), clientv3.WithRev(first.Header.Revision))
	w2 := cli.Watch(ctx, "w/", clientv3.WithPrefix(), clientv3.WithRev(first.Header.Revision+1), clientv3.WithPrevKV(), clientv3.WithFilterDelete())
	type stream struct {
		mu     sync.Mutex
		events []*clientv3.Event
		err    error
		// closed: the channel closed. clientv3 closes it without an
		// error when the server cancels the watch (the reason is in the
		// server's log).
		closed bool
	}
	collect := func(wc clientv3.WatchChan) *stream {
		s := &stream{}
		go func() {
			for wr := range wc {
				s.mu.Lock()
				if wr.Err() != nil {
					s.err = wr.Err()
				}
				s.events = append(s.events, wr.Events...)
				s.mu.Unlock()
			}
			s.mu.Lock()
			s.closed = true
			s.mu.Unlock()
		}()
		return s
	}
	s1, s2 := collect(w1), collect(w2)

	var mu sync.Mutex
	var foreign atomic.Int64
	ops := []op{{key: "w/start", rev: first.Header.Revision, acked: true}}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	clients := []*clientv3.Client{cli, newClient(t, c.Addrs()[0]), newClient(t, c.Addrs()[1]), newClient(t, c.Addrs()[2])}
	for g, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; wctx.Err() == nil && i < 2000; i++ {
				k := fmt.Sprintf("w/%d", (g*7+i)%10)
				o := op{key: k, del: i%5 == 4}
				rctx, cancel := context.WithTimeout(wctx, 10*time.Second)
				var err error
				var h *etcdserverpb.ResponseHeader
				if o.del {
					var r *clientv3.DeleteResponse
					if r, err = cl.Delete(rctx, k); err == nil {
						h, o.acked = r.Header, r.Deleted == 1
					}
				} else {
					var r *clientv3.PutResponse
					if r, err = cl.Put(rctx, k, fmt.Sprintf("%d-%d", g, i)); err == nil {
						h, o.acked = r.Header, true
					}
				}
				cancel()
				o.client, o.at = g, time.Since(begin)
				if h != nil {
					o.rev, o.member = h.Revision, h.MemberId
					if h.ClusterId != first.Header.ClusterId {
						// Another cluster answered: while the stopped node's
						// address was free, a node of another test process
						// (tests run side by side) listened on it, and etcd's
						// client, which checks no cluster ID, wrote there.
						// Not a write to this cluster.
						foreign.Add(1)
						continue
					}
				}
				if err == nil && !o.acked {
					continue // a delete of a missing key writes nothing
				}
				mu.Lock()
				ops = append(ops, o)
				mu.Unlock()
			}
		}()
	}
	// Stop the leaseholder of the etcd keyspace, then restart it.
	db, err := client.Open(ctx, c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	time.Sleep(2 * time.Second)
	holder := -1
	rs, err := db.Ranges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	k := keys.UserKey(append(bytes.Clone(etcdapi.Prefix), 'k'))
	var rangeID uint64
	for _, r := range rs {
		d := r.Desc
		if bytes.Compare(d.GetStartKey(), k) <= 0 && (len(d.GetEndKey()) == 0 || bytes.Compare(k, d.GetEndKey()) < 0) {
			rangeID = d.GetRangeId()
			holder = c.LeaderOf(rangeID)
		}
	}
	if holder < 0 {
		t.Fatal("no leaseholder found for the etcd keyspace")
	}
	t.Logf("stopping n%d, the etcd keyspace's leaseholder, at %v", holder+1, time.Since(begin))
	c.StopNode(holder)
	t.Logf("n%d stopped at %v", holder+1, time.Since(begin))
	time.Sleep(2 * time.Second)
	if err := c.RestartNode(holder); err != nil {
		t.Fatal(err)
	}
	t.Logf("n%d restarted at %v", holder+1, time.Since(begin))
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	var last, lastPut int64
	acked := map[string]op{}
	for _, o := range ops {
		if o.acked {
			acked[fmt.Sprintf("%s@%d", o.key, o.rev)] = o
			last = max(last, o.rev)
			if !o.del {
				lastPut = max(lastPut, o.rev)
			}
		}
	}
	t.Logf("%d acknowledged writes, last revision %d; %d answered by another cluster (not counted)", len(acked), last, foreign.Load())
	if len(acked) < 20 {
		t.Fatalf("only %d writes acknowledged", len(acked))
	}
	// Every watcher reaches the last acknowledged revision.
	stalled := false
	for name, s := range map[string]*stream{"w1": s1, "w2": s2} {
		last := last
		if name == "w2" {
			last = lastPut // w2 filters deletes out
		}
		// Waiting for progress, not for a time: the watcher fails only if
		// it delivers nothing new for a minute before it gets there.
		seen := -1
		if !waitForProgressOK(name+" reaching the last revision", time.Minute, func() (bool, bool) {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.err != nil {
				t.Fatalf("%s: %v", name, s.err)
			}
			if s.closed && (len(s.events) == 0 || s.events[len(s.events)-1].Kv.ModRevision < last) {
				t.Fatalf("%s: the watch ended (cancelled by the server: its log says why) after %d events", name, len(s.events))
			}
			progressed := len(s.events) > seen
			seen = len(s.events)
			return len(s.events) > 0 && s.events[len(s.events)-1].Kv.ModRevision >= last, progressed
		}) {
			// Say what the stall looks like, then let the checks below
			// name every acknowledged write that is missing.
			s.mu.Lock()
			var got int64
			if len(s.events) > 0 {
				got = s.events[len(s.events)-1].Kv.ModRevision
			}
			s.mu.Unlock()
			t.Errorf("%s: no progress for a minute: last event at revision %d, last acknowledged %d", name, got, last)
			for i := range c.Addrs() {
				n := c.Node(i)
				if n == nil {
					continue
				}
				resolved, closed, watchers, ok := n.FeedStatus(rangeID)
				t.Logf("n%d: r%d rangefeed here %v: resolved %d, closed %d, %d watchers, oldest intent %+v",
					i+1, rangeID, ok, resolved, closed, watchers, n.FeedOldestIntent(rangeID))
			}
			logWatchGoroutines(t)
			stalled = true
		}
	}
	check := func(name string, s *stream, fromRev int64, wantDeletes bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		seen := map[string]bool{}
		var prev int64
		for _, ev := range s.events {
			id := fmt.Sprintf("%s@%d", ev.Kv.Key, ev.Kv.ModRevision)
			if seen[id] {
				t.Errorf("%s: %s delivered twice", name, id)
			}
			seen[id] = true
			if ev.Kv.ModRevision < prev {
				t.Errorf("%s: %s after revision %d: out of order", name, id, prev)
			}
			prev = ev.Kv.ModRevision
			if !wantDeletes && ev.Type == mvccpb.DELETE {
				t.Errorf("%s: a delete passed the NODELETE filter", name)
			}
			if ev.PrevKv != nil && ev.PrevKv.ModRevision >= ev.Kv.ModRevision {
				t.Errorf("%s: %s has prev kv at %d", name, id, ev.PrevKv.ModRevision)
			}
			if o, ok := acked[id]; ok && o.del != (ev.Type == mvccpb.DELETE) {
				t.Errorf("%s: %s: event type %v, the writer did delete=%v", name, id, ev.Type, o.del)
			}
		}
		var missing []op
		for id, o := range acked {
			if o.rev < fromRev || (o.del && !wantDeletes) {
				continue
			}
			if !seen[id] {
				missing = append(missing, o)
			}
		}
		sort.Slice(missing, func(i, j int) bool { return missing[i].rev < missing[j].rev })
		for i, o := range missing {
			if i == 10 {
				t.Errorf("%s: and %d more acknowledged writes never delivered, up to revision %d", name, len(missing)-i, missing[len(missing)-1].rev)
				break
			}
			// Is the version in storage? (A watch that skipped it, or a
			// write acknowledged and lost.)
			stored := "not read"
			sk := append(append(bytes.Clone(etcdapi.Prefix), 'k'), o.key...)
			if kvs, err := db.ScanAt(ctx, sk, append(bytes.Clone(sk), 0), uint64(o.rev), 1); err != nil {
				stored = err.Error()
			} else if len(kvs) == 1 && kvs[0].Ts == uint64(o.rev) {
				stored = "in storage"
			} else if len(kvs) == 1 {
				stored = fmt.Sprintf("NOT in storage (newest at or below: %d)", kvs[0].Ts)
			} else {
				stored = "NOT in storage (no version at or below)"
			}
			// And in each node's engine?
			var per []string
			for i := range c.Addrs() {
				nd := c.Node(i)
				if nd == nil {
					per = append(per, fmt.Sprintf("n%d down", i+1))
					continue
				}
				_, vts, _, err := mvcc.Get(nd.Engine(), keys.UserKey(sk), mvcc.Timestamp(o.rev), 0)
				per = append(per, fmt.Sprintf("n%d %v", i+1, err == nil && uint64(vts) == uint64(o.rev)))
			}
			t.Errorf("%s: acknowledged %s@%d (delete %v, writer %d via n%d, acked at %v; %s; per node %v; leader now n%d) never delivered", name, o.key, o.rev, o.del, o.client, o.member, o.at, stored, per, c.LeaderOf(rangeID)+1)
		}
		if len(missing) > 0 {
			lo, hi, between := missing[0].rev, missing[len(missing)-1].rev, 0
			for id, o := range acked {
				if o.rev > lo && o.rev < hi && seen[id] {
					between++
				}
			}
			t.Errorf("%s: %d acknowledged writes between the first and the last missing one were delivered", name, between)
		}
		t.Logf("%s: %d events", name, len(s.events))
	}
	check("w1", s1, first.Header.Revision, true)
	check("w2", s2, first.Header.Revision+1, false)
	if stalled {
		return
	}
	// w2's prev_kv is the key's previous change in w1's stream (which has
	// every change from w2's start on): its value at that revision, or none
	// after a delete.
	s1.mu.Lock()
	s2.mu.Lock()
	defer s1.mu.Unlock()
	defer s2.mu.Unlock()
	byKey := map[string][]*clientv3.Event{}
	for _, ev := range s1.events {
		byKey[string(ev.Kv.Key)] = append(byKey[string(ev.Kv.Key)], ev)
	}
	checked := 0
	for _, ev := range s2.events {
		hist := byKey[string(ev.Kv.Key)]
		i := sort.Search(len(hist), func(i int) bool { return hist[i].Kv.ModRevision >= ev.Kv.ModRevision })
		if i == 0 {
			continue // the previous change is older than w1's start
		}
		p := hist[i-1]
		id := fmt.Sprintf("%s@%d", ev.Kv.Key, ev.Kv.ModRevision)
		switch {
		case p.Type == mvccpb.DELETE && ev.PrevKv != nil:
			t.Errorf("w2: %s has prev kv %q@%d; the key was deleted at %d", id, ev.PrevKv.Value, ev.PrevKv.ModRevision, p.Kv.ModRevision)
		case p.Type == mvccpb.PUT && (ev.PrevKv == nil || ev.PrevKv.ModRevision != p.Kv.ModRevision || !bytes.Equal(ev.PrevKv.Value, p.Kv.Value)):
			t.Errorf("w2: %s has prev kv %v, want %q@%d", id, ev.PrevKv, p.Kv.Value, p.Kv.ModRevision)
		}
		checked++
	}
	t.Logf("w2: %d prev kvs checked against w1's stream", checked)
}

// Progress notifications carry a revision at which everything before has
// been delivered; a watch from a compacted revision is refused.
func TestWatchProgressAndCompaction(t *testing.T) {
	_, cli := startCluster(t, 1)
	ctx := testCtx(t)
	p := must(cli.Put(ctx, "x", "1"))(t)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := cli.Watch(wctx, "x", clientv3.WithRev(p.Header.Revision))
	wr := <-w
	if len(wr.Events) != 1 || wr.Events[0].Kv.ModRevision != p.Header.Revision {
		t.Fatalf("first response: %+v", wr)
	}
	p2 := must(cli.Put(ctx, "x", "2"))(t)
	if err := cli.RequestProgress(wctx); err != nil {
		t.Fatal(err)
	}
	for got := false; !got; {
		wr := <-w
		if wr.Err() != nil {
			t.Fatal(wr.Err())
		}
		if wr.IsProgressNotify() {
			got = true
		}
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision != p2.Header.Revision {
				t.Fatalf("event %+v", ev)
			}
		}
	}
	must(cli.Compact(ctx, p2.Header.Revision))(t)
	wr = <-cli.Watch(ctx, "x", clientv3.WithRev(p.Header.Revision))
	if wr.CompactRevision != p2.Header.Revision || !wr.Canceled {
		t.Fatalf("watch from a compacted revision: %+v", wr)
	}
}

// logWatchGoroutines logs the stacks of the goroutines that serve or
// follow a watch (the etcd API's sessions, client.Watcher, clientv3's
// watch streams), at most 40, for a test that saw a watch stall.
func logWatchGoroutines(t *testing.T) {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		if !strings.Contains(g, "etcdapi.") && !strings.Contains(g, "client.(*Watcher)") && !strings.Contains(g, "client/v3.(*watch") {
			continue
		}
		if n++; n > 40 {
			t.Log("(more goroutines left out)")
			return
		}
		t.Logf("goroutine stack:\n%s", g)
	}
}

// A node that stops does not cancel the watches it serves. A node closes
// its etcd API (and the Canopy client under it) before its gRPC server; a
// watch that then ended on the closed client used to be cancelled, which
// etcd's Go client takes as final (it closes the channel without an
// error): the CI stall of TestWatchMatchesHistoryAcrossLeaseholderRestart.
// Here an etcd API server runs on its own gRPC server over the cluster; it
// is closed while its gRPC server still serves (the order a node stops
// in), then the gRPC server stops and a new one serves the address. The
// watcher, whose only endpoint that is, must get every write once, in
// order, from before and after.
func TestWatchSurvivesItsServerStopping(t *testing.T) {
	c, cli := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	serve := func(lis net.Listener) (*etcdapi.Server, *grpc.Server) {
		s, err := etcdapi.New(etcdapi.Options{Open: func(ctx context.Context) (*client.DB, error) {
			return client.Open(ctx, c.Addrs())
		}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		s.Register(g)
		s.Start()
		go func() { _ = g.Serve(lis) }()
		return s, g
	}
	s, g := serve(lis)
	wcli := newClient(t, addr)
	first := must(cli.Put(ctx, "s/0", "0"))(t)
	wc := wcli.Watch(ctx, "s/", clientv3.WithPrefix(), clientv3.WithRev(first.Header.Revision))
	var revs []int64
	recv := func(n int) {
		t.Helper()
		for len(revs) < n {
			select {
			case wr, ok := <-wc:
				if !ok {
					t.Fatalf("the watch channel closed after %d events: the server cancelled the watch", len(revs))
				}
				if wr.Err() != nil {
					t.Fatalf("watch: %v", wr.Err())
				}
				for _, ev := range wr.Events {
					revs = append(revs, ev.Kv.ModRevision)
				}
			case <-ctx.Done():
				t.Fatalf("%d events of %d: %v", len(revs), n, ctx.Err())
			}
		}
	}
	want := []int64{first.Header.Revision}
	for i := 1; i < 10; i++ {
		want = append(want, must(cli.Put(ctx, fmt.Sprintf("s/%d", i), "a"))(t).Header.Revision)
	}
	recv(len(want))
	// Closing the API ends the watch's Canopy watch (its client is
	// closed) while the stream is still up: the server must not cancel.
	s.Close()
	for i := 0; i < 10; i++ {
		want = append(want, must(cli.Put(ctx, fmt.Sprintf("s/%d", i), "b"))(t).Header.Revision)
	}
	g.Stop()
	var lis2 net.Listener
	for attempt := 0; ; attempt++ { // the port may linger briefly
		if lis2, err = net.Listen("tcp", addr); err == nil || attempt == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	s2, g2 := serve(lis2)
	defer func() { g2.Stop(); s2.Close() }()
	for i := 0; i < 10; i++ {
		want = append(want, must(cli.Put(ctx, fmt.Sprintf("s/%d", i), "c"))(t).Header.Revision)
	}
	recv(len(want))
	if len(revs) != len(want) {
		t.Fatalf("%d events, want %d", len(revs), len(want))
	}
	for i := range want {
		if revs[i] != want[i] {
			t.Fatalf("event %d at revision %d, want %d (every write once, in order)", i, revs[i], want[i])
		}
	}
}
