package etcdapi_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/testcluster"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// startCluster starts an in-process cluster of n nodes and returns it with
// an etcd client (etcd's own Go client) on every node's address.
func startCluster(t *testing.T, n int) (*testcluster.Cluster, *clientv3.Client) {
	t.Helper()
	c, err := testcluster.Start(testcluster.Options{Nodes: n, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("starting cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c, newClient(t, c.Addrs()...)
}

func newClient(t *testing.T, addrs ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: addrs, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// must(f())(t) is f's value, or fails t with f's error.
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestPutGetRangeOptions(t *testing.T) {
	_, cli := startCluster(t, 3)
	ctx := testCtx(t)
	p1 := must(cli.Put(ctx, "a", "1"))(t)
	p2 := must(cli.Put(ctx, "a", "2", clientv3.WithPrevKV()))(t)
	if p2.Header.Revision <= p1.Header.Revision {
		t.Fatalf("revisions do not increase: %d then %d", p1.Header.Revision, p2.Header.Revision)
	}
	if p2.PrevKv == nil || string(p2.PrevKv.Value) != "1" || p2.PrevKv.ModRevision != p1.Header.Revision {
		t.Fatalf("prev kv %v, want value 1 at %d", p2.PrevKv, p1.Header.Revision)
	}
	g := must(cli.Get(ctx, "a"))(t)
	if len(g.Kvs) != 1 {
		t.Fatalf("get: %v", g.Kvs)
	}
	kv := g.Kvs[0]
	if string(kv.Value) != "2" || kv.Version != 2 || kv.CreateRevision != p1.Header.Revision || kv.ModRevision != p2.Header.Revision {
		t.Fatalf("get a = %+v; want value 2, version 2, create %d, mod %d", kv, p1.Header.Revision, p2.Header.Revision)
	}
	if g.Header.Revision < p2.Header.Revision {
		t.Fatalf("read revision %d below the last write's %d", g.Header.Revision, p2.Header.Revision)
	}
	for i := 0; i < 5; i++ {
		must(cli.Put(ctx, fmt.Sprintf("p/%d", i), fmt.Sprintf("v%d", 4-i)))(t)
	}
	r := must(cli.Get(ctx, "p/", clientv3.WithPrefix(), clientv3.WithLimit(2)))(t)
	if len(r.Kvs) != 2 || !r.More || r.Count != 5 || string(r.Kvs[0].Key) != "p/0" {
		t.Fatalf("limit 2: %d kvs, more %v, count %d", len(r.Kvs), r.More, r.Count)
	}
	r = must(cli.Get(ctx, "p/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortAscend)))(t)
	if len(r.Kvs) != 5 || string(r.Kvs[0].Key) != "p/4" {
		t.Fatalf("sort by value: first %q", r.Kvs[0].Key)
	}
	r = must(cli.Get(ctx, "p/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(1)))(t)
	if len(r.Kvs) != 1 || string(r.Kvs[0].Key) != "p/4" || !r.More {
		t.Fatalf("sort by key descending, limit 1: %v", r.Kvs)
	}
	r = must(cli.Get(ctx, "p/", clientv3.WithPrefix(), clientv3.WithKeysOnly()))(t)
	if len(r.Kvs) != 5 || r.Kvs[0].Value != nil {
		t.Fatalf("keys only: %v", r.Kvs)
	}
	r = must(cli.Get(ctx, "p/", clientv3.WithPrefix(), clientv3.WithCountOnly()))(t)
	if len(r.Kvs) != 0 || r.Count != 5 {
		t.Fatalf("count only: %d kvs, count %d", len(r.Kvs), r.Count)
	}
	r = must(cli.Get(ctx, "p/", clientv3.WithPrefix(), clientv3.WithSerializable()))(t)
	if len(r.Kvs) != 5 {
		t.Fatalf("serializable: %d kvs", len(r.Kvs))
	}
	r = must(cli.Get(ctx, "p/1", clientv3.WithRange("p/3")))(t)
	if len(r.Kvs) != 2 {
		t.Fatalf("range [p/1, p/3): %d kvs", len(r.Kvs))
	}
	r = must(cli.Get(ctx, "a", clientv3.WithFromKey()))(t)
	if r.Count != 6 {
		t.Fatalf("from key a: count %d, want 6", r.Count)
	}
	// A read at an old revision sees the value of then.
	r = must(cli.Get(ctx, "a", clientv3.WithRev(p1.Header.Revision)))(t)
	if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "1" {
		t.Fatalf("get a at %d: %v", p1.Header.Revision, r.Kvs)
	}
	// Filters on revisions.
	r = must(cli.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithMinModRev(p2.Header.Revision+1)))(t)
	if r.Count != 6 || len(r.Kvs) != 5 {
		t.Fatalf("min mod rev: count %d, %d kvs", r.Count, len(r.Kvs))
	}
	// Delete with prev_kv.
	d := must(cli.Delete(ctx, "p/", clientv3.WithPrefix(), clientv3.WithPrevKV()))(t)
	if d.Deleted != 5 || len(d.PrevKvs) != 5 || string(d.PrevKvs[1].Value) != "v3" {
		t.Fatalf("delete: %d deleted, prev %v", d.Deleted, d.PrevKvs)
	}
	must(cli.Put(ctx, "p/1", "again"))(t)
	r = must(cli.Get(ctx, "p/1"))(t)
	if r.Kvs[0].Version != 1 || r.Kvs[0].CreateRevision != r.Kvs[0].ModRevision {
		t.Fatalf("recreated key: %+v", r.Kvs[0])
	}
	// Compaction.
	c := must(cli.Compact(ctx, p2.Header.Revision))(t)
	_ = c
	if _, err := cli.Get(ctx, "a", clientv3.WithRev(p1.Header.Revision)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("get below the compacted revision: %v, want %v", err, rpctypes.ErrCompacted)
	}
	if _, err := cli.Get(ctx, "a", clientv3.WithRev(1<<62)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("get at a future revision: %v", err)
	}
	if _, err := cli.Put(ctx, "", "x"); !errors.Is(err, rpctypes.ErrEmptyKey) {
		t.Fatalf("empty key: %v", err)
	}
}

func TestTxnCompares(t *testing.T) {
	_, cli := startCluster(t, 3)
	ctx := testCtx(t)
	must(cli.Put(ctx, "o", "other"))(t)
	p := must(cli.Put(ctx, "k", "v1"))(t)
	rev := p.Header.Revision
	for _, tc := range []struct {
		name string
		cmp  clientv3.Cmp
		want bool
	}{
		{"value =", clientv3.Compare(clientv3.Value("k"), "=", "v1"), true},
		{"value !=", clientv3.Compare(clientv3.Value("k"), "!=", "v1"), false},
		{"value >", clientv3.Compare(clientv3.Value("k"), ">", "v0"), true},
		{"value of missing", clientv3.Compare(clientv3.Value("missing"), "!=", "x"), false},
		{"version =", clientv3.Compare(clientv3.Version("k"), "=", 1), true},
		{"version of missing", clientv3.Compare(clientv3.Version("missing"), "=", 0), true},
		{"create =", clientv3.Compare(clientv3.CreateRevision("k"), "=", rev), true},
		{"create of missing", clientv3.Compare(clientv3.CreateRevision("missing"), "=", 0), true},
		{"mod <", clientv3.Compare(clientv3.ModRevision("k"), "<", rev+1), true},
		{"mod >", clientv3.Compare(clientv3.ModRevision("k"), ">", rev), false},
		{"lease =", clientv3.Compare(clientv3.LeaseValue("k"), "=", clientv3.NoLease), true},
		{"prefix version", clientv3.Compare(clientv3.Version("k").WithPrefix(), ">", 0), true},
	} {
		r := must(cli.Txn(ctx).If(tc.cmp).Then(clientv3.OpGet("k")).Else(clientv3.OpGet("missing")).Commit())(t)
		if r.Succeeded != tc.want {
			t.Errorf("%s: succeeded %v, want %v", tc.name, r.Succeeded, tc.want)
		}
		if len(r.Responses) != 1 {
			t.Errorf("%s: %d responses", tc.name, len(r.Responses))
		}
	}
	// A compare-and-swap with writes, reads of the writes and a nested txn.
	r := must(cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision("k"), "=", rev)).Then(
		clientv3.OpPut("k", "v2", clientv3.WithPrevKV()),
		clientv3.OpPut("n", "new"),
		clientv3.OpGet("n"),
		clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Version("n"), "=", 1)},
			[]clientv3.Op{clientv3.OpDelete("o", clientv3.WithPrevKV())}, nil),
	).Commit())(t)
	if !r.Succeeded {
		t.Fatal("CAS failed")
	}
	trev := r.Header.Revision
	if trev <= rev {
		t.Fatalf("txn revision %d not above %d", trev, rev)
	}
	if pk := r.Responses[0].GetResponsePut().PrevKv; string(pk.Value) != "v1" {
		t.Fatalf("prev kv %v", pk)
	}
	got := r.Responses[2].GetResponseRange().Kvs[0]
	if string(got.Value) != "new" || got.ModRevision != trev || got.CreateRevision != trev || got.Version != 1 {
		t.Fatalf("own write read in the txn: %+v, want revisions %d", got, trev)
	}
	nested := r.Responses[3].GetResponseTxn()
	if !nested.Succeeded || nested.Responses[0].GetResponseDeleteRange().Deleted != 1 {
		t.Fatalf("nested: %+v", nested)
	}
	if pk := nested.Responses[0].GetResponseDeleteRange().PrevKvs[0]; string(pk.Value) != "other" || pk.ModRevision >= rev {
		t.Fatalf("nested delete's prev kv %+v", pk)
	}
	g := must(cli.Get(ctx, "n"))(t)
	if g.Kvs[0].ModRevision != trev {
		t.Fatalf("n's mod revision %d, the txn's %d", g.Kvs[0].ModRevision, trev)
	}
	if g := must(cli.Get(ctx, "o"))(t); len(g.Kvs) != 0 {
		t.Fatalf("o not deleted: %v", g.Kvs)
	}
	if g := must(cli.Get(ctx, "k"))(t); string(g.Kvs[0].Value) != "v2" || g.Kvs[0].Version != 2 || g.Kvs[0].CreateRevision != rev {
		t.Fatalf("k after the txn: %+v", g.Kvs[0])
	}
	// A put then a delete of one key in a txn is etcd's duplicate key.
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut("k", "x"), clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpDelete("k")}, nil)).Commit(); !errors.Is(err, rpctypes.ErrDuplicateKey) {
		t.Fatalf("put and delete of k: %v", err)
	}
	// The same compare again fails: the key changed.
	r = must(cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision("k"), "=", rev)).Then(clientv3.OpPut("k", "v3")).Commit())(t)
	if r.Succeeded {
		t.Fatal("stale CAS succeeded")
	}
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut("d", "1"), clientv3.OpPut("d", "2")).Commit(); !errors.Is(err, rpctypes.ErrDuplicateKey) {
		t.Fatalf("duplicate put: %v", err)
	}
}
