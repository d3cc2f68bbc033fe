package etcdapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/security"
	"github.com/canopy-db/canopy/internal/testcluster"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// With certificates, etcd's client presents a Canopy client certificate
// and the node's TLS and authorization apply: a user with a certificate
// may use the API, a caller without one is refused before anything runs.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	o := security.CreateOptions{CertsDir: dir}
	if err := security.CreateCA(o); err != nil {
		t.Fatal(err)
	}
	if err := security.CreateNode(o, []string{"127.0.0.1", "localhost"}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{security.AdminUserDefault, "alice"} {
		if err := security.CreateClient(o, u); err != nil {
			t.Fatal(err)
		}
	}
	c, err := testcluster.Start(testcluster.Options{Nodes: 1, Dir: t.TempDir(), CertsDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := testCtx(t)
	open := func(user string) *clientv3.Client {
		cfg := clientv3.Config{Endpoints: c.Addrs(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()}
		if user == "" {
			tlsCfg, err := security.LoadClientTLS(dir, "alice")
			if err != nil {
				t.Fatal(err)
			}
			tlsCfg = tlsCfg.Clone()
			tlsCfg.Certificates, tlsCfg.GetClientCertificate = nil, nil
			cfg.TLS = tlsCfg
		} else {
			tlsCfg, err := security.LoadClientTLS(dir, user)
			if err != nil {
				t.Fatal(err)
			}
			cfg.TLS = tlsCfg
		}
		cli, err := clientv3.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		return cli
	}
	alice := open("alice")
	must(alice.Put(ctx, "k", "v"))(t)
	if g := must(alice.Get(ctx, "k"))(t); string(g.Kvs[0].Value) != "v" {
		t.Fatalf("get: %v", g.Kvs)
	}
	must(alice.MemberList(ctx))(t)
	nobody := open("")
	qctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err = nobody.Put(qctx, "k", "x")
	if s, _ := status.FromError(err); s.Code() != codes.Unauthenticated {
		t.Fatalf("put without a client certificate: %v", err)
	}
	if g := must(alice.Get(ctx, "k"))(t); string(g.Kvs[0].Value) != "v" {
		t.Fatalf("a refused put changed k: %v", g.Kvs)
	}
}
