package process

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/etcdapi"
	"github.com/canopy-db/canopy/internal/keys"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestEtcdWatchSurvivesLeaseholderKill: three node processes, one etcd
// watcher (etcd's Go client) connected to each node alone, writers
// through etcd's client on every node. The leaseholder of the etcd
// keyspace is killed with SIGKILL and restarted. Each watcher's stream is
// then compared with what the writers were told: every acknowledged write
// delivered exactly once, in revision order; nothing delivered that no
// writer attempted. The watcher on the killed node resumes, after the
// restart, from the revision after its last event (etcd's client does
// this by itself).
func TestEtcdWatchSurvivesLeaseholderKill(t *testing.T) {
	needBinary(t)
	c := newCluster(t, 3)
	c.mustCLI("init", "--host", c.addrs[0])
	c.waitLive(3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	open := func(addrs ...string) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: addrs, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
	all := open(c.addrs...)
	var first *clientv3.PutResponse
	c.eventually("the first etcd put", func() error {
		octx, ocancel := context.WithTimeout(ctx, opMax)
		defer ocancel()
		var err error
		first, err = all.Put(octx, "w/start", "0")
		return err
	})
	type stream struct {
		mu     sync.Mutex
		events []*clientv3.Event
		err    error
	}
	var streams []*stream
	for _, a := range c.addrs {
		s := &stream{}
		streams = append(streams, s)
		wc := open(a).Watch(clientv3.WithRequireLeader(ctx), "w/", clientv3.WithPrefix(), clientv3.WithRev(first.Header.Revision))
		go func() {
			for wr := range wc {
				s.mu.Lock()
				if err := wr.Err(); err != nil && s.err == nil {
					s.err = err
				}
				s.events = append(s.events, wr.Events...)
				s.mu.Unlock()
			}
		}()
	}

	type write struct {
		key   string
		rev   int64
		del   bool
		acked bool
	}
	var mu sync.Mutex
	attempted := map[string]bool{"w/start": true} // key: every key written; for unacked writes
	acked := map[string]write{fmt.Sprintf("w/start@%d", first.Header.Revision): {key: "w/start", rev: first.Header.Revision, acked: true}}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		cli := open(c.addrs...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; wctx.Err() == nil && i < 5000; i++ {
				k := fmt.Sprintf("w/%d-%d", g, i%8)
				del := i%4 == 3
				octx, ocancel := context.WithTimeout(wctx, opMax)
				var rev int64
				var ok bool
				var err error
				var cluster uint64
				if del {
					var r *clientv3.DeleteResponse
					if r, err = cli.Delete(octx, k); err == nil {
						rev, ok, cluster = r.Header.Revision, r.Deleted == 1, r.Header.ClusterId
					}
				} else {
					var r *clientv3.PutResponse
					if r, err = cli.Put(octx, k, fmt.Sprint(i)); err == nil {
						rev, ok, cluster = r.Header.Revision, true, r.Header.ClusterId
					}
				}
				ocancel()
				if err == nil && cluster != first.Header.ClusterId {
					// Another cluster answered: while the killed node was
					// down, a node of another test process listened on its
					// port, and etcd's client checks no cluster ID
					// (docs/ETCD-API.md). Not a write to this cluster.
					ok = false
				}
				mu.Lock()
				attempted[k] = true
				if ok {
					acked[fmt.Sprintf("%s@%d", k, rev)] = write{key: k, rev: rev, del: del, acked: true}
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	db, err := client.Open(ctx, c.addrs, client.WithOptions(client.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	time.Sleep(2 * time.Second)
	slot, rangeID := leaseholderOf(c, db, keys.UserKey(append(bytes.Clone(etcdapi.Prefix), 'k')))
	t.Logf("kill -9 node %d, leaseholder of the etcd keyspace (r%d)", slot+1, rangeID)
	c.kill9(slot)
	time.Sleep(3 * time.Second)
	c.start(slot)
	time.Sleep(3 * time.Second)
	stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var last int64
	for _, w := range acked {
		last = max(last, w.rev)
	}
	t.Logf("%d acknowledged writes, last revision %d", len(acked), last)
	if len(acked) < 50 {
		t.Fatalf("only %d writes acknowledged", len(acked))
	}
	// A marker after everything: every watcher must reach it.
	var marker *clientv3.PutResponse
	c.eventually("the marker put", func() error {
		octx, ocancel := context.WithTimeout(ctx, opMax)
		defer ocancel()
		marker, err = all.Put(octx, "w/zz-marker", "end")
		return err
	})
	for i, s := range streams {
		c.eventually(fmt.Sprintf("watcher on node %d reaching the marker", i+1), func() error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.err != nil {
				t.Fatalf("watcher on node %d: %v", i+1, s.err)
			}
			if n := len(s.events); n == 0 || s.events[n-1].Kv.ModRevision < marker.Header.Revision {
				return fmt.Errorf("%d events so far", n)
			}
			return nil
		})
		s.mu.Lock()
		seen := map[string]bool{}
		var prev int64
		for _, ev := range s.events {
			id := fmt.Sprintf("%s@%d", ev.Kv.Key, ev.Kv.ModRevision)
			if seen[id] {
				t.Errorf("watcher %d: %s delivered twice", i+1, id)
			}
			seen[id] = true
			if ev.Kv.ModRevision < prev {
				t.Errorf("watcher %d: %s after revision %d", i+1, id, prev)
			}
			prev = ev.Kv.ModRevision
			if w, ok := acked[id]; ok && w.del != (ev.Type == mvccpb.DELETE) {
				t.Errorf("watcher %d: %s is a %v, the writer deleted=%v", i+1, id, ev.Type, w.del)
			}
			if !attempted[string(ev.Kv.Key)] && string(ev.Kv.Key) != "w/zz-marker" {
				t.Errorf("watcher %d: %s was never written", i+1, id)
			}
		}
		for id := range acked {
			if !seen[id] {
				t.Errorf("watcher %d: acknowledged %s never delivered", i+1, id)
			}
		}
		t.Logf("watcher on node %d: %d events", i+1, len(s.events))
		s.mu.Unlock()
	}
}
