package testcluster_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/security"
	"github.com/canopy-db/canopy/internal/testcluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// makeCerts writes a CA, a node certificate for 127.0.0.1 and client
// certificates of users into dir.
func makeCerts(t *testing.T, dir string, users ...string) {
	t.Helper()
	o := security.CreateOptions{CertsDir: dir}
	if err := security.CreateCA(o); err != nil {
		t.Fatal(err)
	}
	if err := security.CreateNode(o, []string{"127.0.0.1", "localhost"}); err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if err := security.CreateClient(o, u); err != nil {
			t.Fatal(err)
		}
	}
}

// syncBuffer is a log sink the nodes write to from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTLS runs a three-node cluster with mutual TLS. The bank workload
// runs as the user alice, who is not the admin: her transactions (user
// keys, status and heartbeat records) go through. Then every kind of
// caller the cluster must refuse is refused, and each refusal is logged
// by the node:
//   - a client without a certificate (Unauthenticated), one in plaintext
//     and one whose certificate another CA signed (handshake refused);
//   - alice on administrative RPCs (Split) and on writes of the cluster's
//     settings (PermissionDenied), which root may make;
//   - a peer that is not a node: a client certificate on the Internal
//     service (PermissionDenied), a node certificate of another CA, and a
//     plaintext peer (handshake refused); a node certificate of this
//     cluster's CA is served.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certs, foreign := filepath.Join(dir, "certs"), filepath.Join(dir, "foreign")
	makeCerts(t, certs, "root", "alice")
	makeCerts(t, foreign, "root")
	logs := &syncBuffer{}
	c := startCluster(t, testcluster.Options{Dir: filepath.Join(dir, "stores"), InitialRanges: 4, CertsDir: certs,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})

	clientTLS := func(dir, user string) *tls.Config {
		cfg, err := security.LoadClientTLS(dir, user)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	alice, root := clientTLS(certs, "alice"), clientTLS(certs, "root")
	open := func(cfg *tls.Config) (*client.DB, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return client.Open(ctx, c.Addrs(), client.WithOptions(client.Options{TLS: cfg, DialTimeout: time.Second, RPCTimeout: workloadRPCTimeout}))
	}

	t.Run("bank as a user who is not the admin", func(t *testing.T) {
		accounts, transfers, workers := 200, 120, 4
		b := newBankWorkload(accounts)
		var dbs []*client.DB
		for range workers {
			db, err := open(alice)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			dbs = append(dbs, db)
		}
		b.setup(t, dbs[0])
		b.run(t, dbs, testSeed(t), transfers, nil)
		if n := len(b.mu.acked); n == 0 {
			t.Fatalf("no transfer committed: %v", b.mu.errs)
		}
		b.verify(t, dbs[0])
	})

	t.Run("clients refused", func(t *testing.T) {
		noCert := &tls.Config{RootCAs: root.RootCAs, MinVersion: tls.VersionTLS13}
		if _, err := open(noCert); !errors.Is(err, client.ErrPermission) || !strings.Contains(err.Error(), "needs a client certificate") {
			t.Errorf("client without a certificate: %v, want ErrPermission (no certificate)", err)
		}
		if _, err := open(nil); !errors.Is(err, client.ErrUnavailable) {
			t.Errorf("plaintext client: %v, want ErrUnavailable", err)
		}
		// The foreign CA's root: its certificate does not verify here, and
		// it does not trust the node's certificate either.
		if _, err := open(clientTLS(foreign, "root")); !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("client with another CA's certificate: %v, want ErrUnavailable naming the certificate", err)
		}
		// Another CA's client certificate presented to a client that trusts
		// this cluster's CA: the node refuses the handshake.
		mixed := clientTLS(foreign, "root")
		mixed.RootCAs = root.RootCAs
		if _, err := open(mixed); !errors.Is(err, client.ErrUnavailable) {
			t.Errorf("client certificate of another CA: %v, want ErrUnavailable", err)
		}
	})

	t.Run("admin RPCs and settings need root", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		adb, err := open(alice)
		if err != nil {
			t.Fatal(err)
		}
		defer adb.Close()
		if err := adb.Split(ctx, []byte("m")); !errors.Is(err, client.ErrPermission) || !strings.Contains(err.Error(), `admin user "root"`) {
			t.Errorf("alice's split: %v, want ErrPermission naming root", err)
		}
		if err := adb.SetTxnSwitches(ctx, client.TxnSwitches{OnePC: client.ToggleOff}); !errors.Is(err, client.ErrPermission) {
			t.Errorf("alice's settings write: %v, want ErrPermission", err)
		}
		rdb, err := open(root)
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		if err := rdb.Split(ctx, []byte("m")); err != nil {
			t.Errorf("root's split: %v", err)
		}
		if err := rdb.SetTxnSwitches(ctx, client.TxnSwitches{}); err != nil {
			t.Errorf("root's settings write: %v", err)
		}
	})

	t.Run("peers refused", func(t *testing.T) {
		ping := func(creds credentials.TransportCredentials) error {
			conn, err := grpc.NewClient(c.Addrs()[0], grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = rpcpb.NewInternalClient(conn).Ping(ctx, &rpcpb.PingRequest{})
			return err
		}
		nodeCerts := func(dir string) credentials.TransportCredentials {
			nc, err := security.LoadNodeCerts(dir)
			if err != nil {
				t.Fatal(err)
			}
			return credentials.NewTLS(nc.PeerTLS())
		}
		if err := ping(nodeCerts(certs)); err != nil {
			t.Errorf("a node of this cluster: %v", err)
		}
		if err := ping(credentials.NewTLS(root)); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "node-to-node") {
			t.Errorf("root's client certificate on the Internal service: %v, want PermissionDenied", err)
		}
		noCert := &tls.Config{RootCAs: root.RootCAs, MinVersion: tls.VersionTLS13}
		if err := ping(credentials.NewTLS(noCert)); status.Code(err) != codes.Unauthenticated {
			t.Errorf("peer without a certificate: %v, want Unauthenticated", err)
		}
		foreignNode := nodeCerts(foreign)
		if err := ping(foreignNode); status.Code(err) != codes.Unavailable {
			t.Errorf("node of another CA: %v, want Unavailable (handshake refused)", err)
		}
		if err := ping(insecure.NewCredentials()); status.Code(err) != codes.Unavailable {
			t.Errorf("plaintext peer: %v, want Unavailable (handshake refused)", err)
		}
	})

	got := logs.String()
	for _, want := range []string{
		`msg="refused an RPC" method=/canopy.KV/ClusterInfo user="(no certificate)"`,
		`msg="refused an RPC" method=/canopy.KV/Split user=alice`,
		`msg="refused an RPC" method=/canopy.KV/Batch user=alice`,
		`msg="refused an RPC" method=/canopy.Internal/Ping user=root`,
		`msg="refused a connection: its TLS handshake failed`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no log line %s in:\n%s", want, got)
		}
	}
}
