package etcdapi_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/etcdapi"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, deadline time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, deadline)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitForProgress waits until cond says done; it fails the test only when
// cond reports no progress for stall.
func waitForProgress(t *testing.T, what string, stall time.Duration, cond func() (done, progressed bool)) {
	t.Helper()
	if !waitForProgressOK(what, stall, cond) {
		t.Fatalf("%s: no progress for %v", what, stall)
	}
}

// waitForProgressOK is waitForProgress reporting a stall (false) instead
// of failing the test, for a caller that says more about it first.
func waitForProgressOK(what string, stall time.Duration, cond func() (done, progressed bool)) bool {
	end := time.Now().Add(stall)
	for {
		done, progressed := cond()
		if done {
			return true
		}
		if progressed {
			end = time.Now().Add(stall)
		} else if time.Now().After(end) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A lease that expires takes its keys with it (a watcher sees them
// deleted); one kept alive does not; a revoked one does at once.
func TestLeases(t *testing.T) {
	_, cli := startCluster(t, 3)
	ctx := testCtx(t)
	short := must(cli.Grant(ctx, 2))(t)
	if short.TTL != 2 {
		t.Fatalf("granted TTL %d", short.TTL)
	}
	// kept's TTL leaves keep-alives (every TTL/3) room on a loaded machine.
	kept := must(cli.Grant(ctx, 5))(t)
	keptGranted := time.Now()
	revoked := must(cli.Grant(ctx, 60))(t)
	w := cli.Watch(ctx, "l/", clientv3.WithPrefix(), clientv3.WithRev(short.ResponseHeader.Revision))
	must(cli.Put(ctx, "l/short", "x", clientv3.WithLease(short.ID)))(t)
	must(cli.Put(ctx, "l/kept", "x", clientv3.WithLease(kept.ID)))(t)
	must(cli.Put(ctx, "l/revoked", "x", clientv3.WithLease(revoked.ID)))(t)
	must(cli.Put(ctx, "l/none", "x"))(t)
	if _, err := cli.Put(ctx, "l/bad", "x", clientv3.WithLease(12345)); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("put with an unknown lease: %v", err)
	}
	ka := must(cli.KeepAlive(ctx, kept.ID))(t)
	go func() {
		for range ka {
		}
	}()
	ttl := must(cli.TimeToLive(ctx, revoked.ID, clientv3.WithAttachedKeys()))(t)
	if ttl.GrantedTTL != 60 || ttl.TTL < 50 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "l/revoked" {
		t.Fatalf("time to live: %+v", ttl)
	}
	ls := must(cli.Leases(ctx))(t)
	if len(ls.Leases) != 3 {
		t.Fatalf("leases: %v", ls.Leases)
	}
	must(cli.Revoke(ctx, revoked.ID))(t)
	if _, err := cli.Revoke(ctx, revoked.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("second revoke: %v", err)
	}
	if g := must(cli.Get(ctx, "l/revoked"))(t); len(g.Kvs) != 0 {
		t.Fatal("the revoked lease's key is still there")
	}
	waitFor(t, "short lease's key deleted", time.Minute, func() bool {
		g := must(cli.Get(ctx, "l/short"))(t)
		return len(g.Kvs) == 0
	})
	if ttl := must(cli.TimeToLive(ctx, short.ID))(t); ttl.TTL != -1 {
		t.Fatalf("expired lease's TTL %d, want -1", ttl.TTL)
	}
	// Past the kept lease's TTL, its key is still there: kept alive.
	time.Sleep(time.Until(keptGranted.Add(7 * time.Second)))
	if g := must(cli.Get(ctx, "l/kept"))(t); len(g.Kvs) != 1 || g.Kvs[0].Lease != int64(kept.ID) {
		t.Fatalf("kept-alive key: %v", g.Kvs)
	}
	deleted := map[string]bool{}
	for wr := range w {
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				deleted[string(ev.Kv.Key)] = true
			}
		}
		if deleted["l/short"] && deleted["l/revoked"] {
			break
		}
	}
	if deleted["l/kept"] || deleted["l/none"] {
		t.Fatalf("deleted: %v", deleted)
	}
}

// etcd's concurrency recipes: Mutex excludes, Election elects one leader
// at a time and hands over when the leader resigns or its session ends.
func TestConcurrencyRecipes(t *testing.T) {
	c, cli := startCluster(t, 3)
	ctx := testCtx(t)
	clients := []*clientv3.Client{cli, newClient(t, c.Addrs()[1]), newClient(t, c.Addrs()[2])}
	// Mutex: three sessions increment a counter under the lock; without
	// exclusion read-then-write would lose increments.
	const rounds = 5
	errc := make(chan error, len(clients))
	for _, cl := range clients {
		go func(cl *clientv3.Client) {
			errc <- func() error {
				s, err := concurrency.NewSession(cl, concurrency.WithTTL(10))
				if err != nil {
					return err
				}
				defer s.Close()
				m := concurrency.NewMutex(s, "lock/")
				for i := 0; i < rounds; i++ {
					if err := m.Lock(ctx); err != nil {
						return err
					}
					g, err := cl.Get(ctx, "counter")
					if err != nil {
						return err
					}
					n := 0
					if len(g.Kvs) == 1 {
						n = int(g.Kvs[0].Value[0])
					}
					if _, err := cl.Put(ctx, "counter", string([]byte{byte(n + 1)})); err != nil {
						return err
					}
					if err := m.Unlock(ctx); err != nil {
						return err
					}
				}
				return nil
			}()
		}(cl)
	}
	for range clients {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if g := must(cli.Get(ctx, "counter"))(t); int(g.Kvs[0].Value[0]) != rounds*len(clients) {
		t.Fatalf("counter %d, want %d", g.Kvs[0].Value[0], rounds*len(clients))
	}
	// Election: the first campaigner leads; a second waits until the
	// first resigns; an observer sees both leaders in turn.
	s1 := must(concurrency.NewSession(clients[0], concurrency.WithTTL(10)))(t)
	s2 := must(concurrency.NewSession(clients[1], concurrency.WithTTL(10)))(t)
	defer s2.Close()
	e1, e2 := concurrency.NewElection(s1, "elect/"), concurrency.NewElection(s2, "elect/")
	if err := e1.Campaign(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	obs := concurrency.NewElection(s2, "elect/").Observe(ctx)
	won := make(chan error, 1)
	go func() { won <- e2.Campaign(ctx, "two") }()
	select {
	case err := <-won:
		t.Fatalf("second campaign won while the first leads: %v", err)
	case <-time.After(time.Second):
	}
	l := must(e1.Leader(ctx))(t)
	if string(l.Kvs[0].Value) != "one" {
		t.Fatalf("leader %q", l.Kvs[0].Value)
	}
	// The first leader's session ends (its lease is revoked): the second wins.
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-won:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("second campaign never won")
	}
	seen := map[string]bool{}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for !seen["two"] {
		select {
		case r := <-obs:
			seen[string(r.Kvs[0].Value)] = true
		case <-octx.Done():
			t.Fatalf("observer saw %v", seen)
		}
	}
	if err := e2.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// Leases outlive a restart of the whole cluster, and expire afterwards
// even if no etcd client comes back (each node looks for leases once it
// starts), but not before their TTL.
func TestLeaseExpiresAfterClusterRestart(t *testing.T) {
	c, cli := startCluster(t, 3)
	ctx := testCtx(t)
	granted := time.Now()
	l := must(cli.Grant(ctx, 3))(t)
	must(cli.Put(ctx, "r/k", "v", clientv3.WithLease(l.ID)))(t)
	_ = cli.Close()
	k := append(append(bytes.Clone(etcdapi.Prefix), 'k'), "r/k"...)
	before, err := client.Open(ctx, c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := before.Get(ctx, k); err != nil || !ok {
		t.Fatalf("the key as Canopy stores it: found %v, %v", ok, err)
	}
	_ = before.Close()
	for i := 0; i < 3; i++ {
		c.StopNode(i)
	}
	for i := 0; i < 3; i++ {
		if err := c.RestartNode(i); err != nil {
			t.Fatal(err)
		}
	}
	// Canopy's own client, not etcd's: nothing here uses the etcd API.
	db, err := client.Open(ctx, c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	waitFor(t, "the lease's key deleted after the restart", 2*time.Minute, func() bool {
		_, ok, err := db.Get(ctx, k)
		return err == nil && !ok
	})
	// Never before its TTL, though the restart moved the oracle (whose
	// clock may then run ahead of the wall clock: LeaseGraceMs).
	if d := time.Since(granted); d < 3*time.Second {
		t.Fatalf("the lease's key was deleted %v after the grant, before its TTL of 3 s", d)
	}
}
