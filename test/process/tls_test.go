package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench/bank"
	"github.com/canopy-db/canopy/internal/security"
	"github.com/canopy-db/canopy/internal/testcluster/check"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestSecureCluster runs three node processes started with --certs-dir,
// with certificates made by `canopy cert` as the README shows (the CA key
// outside the certificates directory): `canopy init` as root, the bank
// workload as alice (a user who is not the admin) with its total checked,
// HTTPS health checks verified against ca.crt and the gRPC health service
// open without a client certificate; alice's split refused and root's
// done; a command without --certs-dir or --insecure, and one with
// --insecure, refused; and the refusals in the node's log.
func TestSecureCluster(t *testing.T) {
	needBinary(t)
	dir := t.TempDir()
	certs, caKey := filepath.Join(dir, "certs"), filepath.Join(dir, "safe", "ca.key")
	c0 := &cluster{t: t}
	for _, args := range [][]string{
		{"cert", "create-ca", "--certs-dir", certs, "--ca-key", caKey},
		{"cert", "create-node", "127.0.0.1", "localhost", "--certs-dir", certs, "--ca-key", caKey},
		{"cert", "create-client", "root", "--certs-dir", certs, "--ca-key", caKey},
		{"cert", "create-client", "alice", "--certs-dir", certs, "--ca-key", caKey},
	} {
		if _, err := c0.cliRaw(args...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c0.cliRaw("cert", "create-client", "alice", "--certs-dir", certs, "--ca-key", caKey); err == nil || !strings.Contains(err.Error(), "--overwrite") {
		t.Fatalf("create-client over an existing certificate: %v, want a refusal naming --overwrite", err)
	}
	if _, err := os.Stat(filepath.Join(certs, security.CAKeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ca.key in the certificates directory despite --ca-key: %v", err)
	}
	if _, err := c0.cliRaw("start", "--store", filepath.Join(dir, "x"), "--listen", "127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("start without --certs-dir or --insecure: %v, want a refusal naming --insecure", err)
	}

	c := newClusterCerts(t, 3, certs)
	if out := c.mustCLI("init", "--host", c.addrs[0], "--initial-ranges", "4"); !strings.Contains(out, "initialized") {
		t.Fatalf("canopy init printed %q", out)
	}
	c.waitLive(3)

	// Health: HTTPS verified against ca.crt; gRPC health without a client
	// certificate.
	caTLS, err := security.LoadCATLS(certs)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: opMax, Transport: &http.Transport{TLSClientConfig: caTLS}}
	for i, nd := range c.nodes {
		c.eventually(fmt.Sprintf("node %d: GET https://.../health?ready=1", i+1), func() error {
			resp, err := hc.Get("https://" + nd.httpAddr + "/health?ready=1")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"ready"`) {
				return fmt.Errorf("%d %s", resp.StatusCode, b)
			}
			return nil
		})
		conn, err := grpc.NewClient(nd.addr, grpc.WithTransportCredentials(credentials.NewTLS(caTLS)))
		if err != nil {
			t.Fatal(err)
		}
		// Readiness follows the ranges' leaders, which may still change
		// just after init (a node steps down, another is elected): the
		// status may read NOT_SERVING for that moment.
		c.eventually(fmt.Sprintf("node %d: gRPC health without a client certificate SERVING", i+1), func() error {
			ctx, cancel := context.WithTimeout(context.Background(), opMax)
			defer cancel()
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				return err
			}
			if resp.Status != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("status %v", resp.Status)
			}
			return nil
		})
		_ = conn.Close()
	}

	// The bank workload as alice.
	aliceTLS, err := security.LoadClientTLS(certs, "alice")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := client.Open(ctx, c.addrs, client.WithOptions(client.Options{TLS: aliceTLS}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := bank.New(db, bank.Options{Accounts: 100})
	if err := b.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	const workers, transfers = 4, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range transfers {
				_ = b.Transfer(ctx, rng) // counted by b.Counts
			}
		}()
	}
	wg.Wait()
	committed, failed := b.Counts()
	balances, err := b.Balances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := check.CheckBankTotal(balances, b.Want()); err != nil {
		t.Fatal(err)
	}
	if committed == 0 {
		t.Fatalf("no transfer committed (%d failed)", failed)
	}
	t.Logf("bank over mutual TLS as alice: %d transfers committed, %d failed; total %d holds", committed, failed, b.Want())

	// Administration needs root; every command needs credentials.
	if _, err := c.cli("admin", "split", c.hostFlag(), "--user", "alice", "m"); err == nil || !strings.Contains(err.Error(), `admin user "root"`) {
		t.Fatalf("alice's split: %v, want a refusal naming the admin user root", err)
	}
	if out := c.mustCLI("admin", "split", c.hostFlag(), "m"); !strings.Contains(out, "split at") {
		t.Fatalf("root's split printed %q", out)
	}
	if _, err := c.cliRaw("kv", "get", c.hostFlag(), "acct/000001"); err == nil || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("kv get without --certs-dir or --insecure: %v", err)
	}
	if _, err := c.cliRaw("kv", "get", c.hostFlag(), "--insecure", "--dial-timeout", "1s", "acct/000001"); err == nil {
		t.Fatal("kv get with --insecure against a secure cluster succeeded")
	}
	if _, err := c.cliRaw("kv", "get", c.hostFlag(), "--certs-dir", certs, "--insecure", "acct/000001"); err == nil {
		t.Fatal("kv get with both --certs-dir and --insecure succeeded")
	}

	logs, _ := os.ReadFile(c.nodes[0].logPath)
	for _, want := range []string{`msg="serving with mutual TLS"`, `msg="refused an RPC"`} {
		if !strings.Contains(string(logs), want) {
			t.Errorf("node 1's log has no %s", want)
		}
	}
	// A plain HTTP request to the HTTPS port is answered 400, not served.
	resp, err := (&http.Client{Timeout: opMax}).Get("http://" + c.nodes[0].httpAddr + "/health")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the HTTPS port: %d, want 400", resp.StatusCode)
		}
	}
}
