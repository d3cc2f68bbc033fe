package security

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// makeCerts creates a CA, a node certificate for 127.0.0.1 and localhost,
// and client certificates for users in dir.
func makeCerts(t *testing.T, dir string, users ...string) {
	t.Helper()
	o := CreateOptions{CertsDir: dir}
	if err := CreateCA(o); err != nil {
		t.Fatal(err)
	}
	if err := CreateNode(o, []string{"127.0.0.1", "localhost"}); err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if err := CreateClient(o, u); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCreateAndLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	makeCerts(t, dir, "root", "alice")
	for name, mode := range map[string]os.FileMode{
		CACertFile: 0o644, CAKeyFile: 0o600, NodeCertFile: 0o644, NodeKeyFile: 0o600,
		ClientCertFile("root"): 0o644, ClientKeyFile("root"): 0o600, ClientKeyFile("alice"): 0o600,
	} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, st.Mode().Perm(), mode)
		}
	}
	nc, err := LoadNodeCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(nc.Hosts(), ","); got != "localhost,127.0.0.1" {
		t.Errorf("node certificate hosts %s, want localhost,127.0.0.1", got)
	}
	leaf := nc.cert.Leaf
	if err := leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Error(err)
	}
	if leaf.NotAfter.Before(time.Now().Add(CertValidityDefault - 24*time.Hour)) {
		t.Errorf("node certificate expires %v, want about %v from now", leaf.NotAfter, CertValidityDefault)
	}
	if leaf.IsCA || leaf.KeyUsage&x509.KeyUsageCertSign != 0 {
		t.Error("node certificate may sign certificates")
	}
	if _, err := LoadClientTLS(dir, "alice"); err != nil {
		t.Fatal(err)
	}
	// A client certificate cannot serve: it lacks the server usage.
	cfg, err := LoadClientTLS(dir, "root")
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Certificates[0].Leaf
	_, err = c.Verify(x509.VerifyOptions{Roots: nc.pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err == nil {
		t.Error("client certificate verifies as a server's")
	}
	if _, err := LoadClientTLS(dir, "bob"); err == nil || !strings.Contains(err.Error(), "client.bob.crt") {
		t.Errorf("missing client certificate: %v, want an error naming client.bob.crt", err)
	}
}

func TestCreateRefusesOverwrite(t *testing.T) {
	dir := t.TempDir()
	makeCerts(t, dir, "root")
	before, _ := os.ReadFile(filepath.Join(dir, CACertFile))
	o := CreateOptions{CertsDir: dir}
	for name, err := range map[string]error{
		"ca":     CreateCA(o),
		"node":   CreateNode(o, []string{"localhost"}),
		"client": CreateClient(o, "root"),
	} {
		if err == nil || !strings.Contains(err.Error(), "--overwrite") {
			t.Errorf("%s: %v, want a refusal naming --overwrite", name, err)
		}
	}
	after, _ := os.ReadFile(filepath.Join(dir, CACertFile))
	if string(before) != string(after) {
		t.Fatal("ca.crt changed")
	}
	o.Overwrite = true
	// A key file made readable by others is made 0600 again.
	if err := os.Chmod(filepath.Join(dir, NodeKeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CreateNode(o, []string{"node1.example", "10.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(dir, NodeKeyFile))
	if st.Mode().Perm() != 0o600 {
		t.Errorf("overwritten node.key mode %v, want 0600", st.Mode().Perm())
	}
	nc, err := LoadNodeCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(nc.Hosts(), ","); got != "node1.example,10.0.0.1" {
		t.Errorf("hosts %s", got)
	}
}

func TestSeparateCAKey(t *testing.T) {
	dir, safe := t.TempDir(), t.TempDir()
	o := CreateOptions{CertsDir: dir, CAKeyPath: filepath.Join(safe, "ca.key")}
	if err := CreateCA(o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, CAKeyFile)); !os.IsNotExist(err) {
		t.Fatalf("ca.key in the certificates directory: %v", err)
	}
	if err := CreateNode(CreateOptions{CertsDir: dir}, []string{"localhost"}); err == nil || !strings.Contains(err.Error(), "--ca-key") {
		t.Fatalf("node certificate without the CA key: %v, want an error naming --ca-key", err)
	}
	if err := CreateNode(o, []string{"localhost"}); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadNodeCerts(dir); err != nil {
		t.Fatal(err)
	}
}

// A node certificate of another CA does not load with this CA.
func TestLoadRefusesForeignNodeCert(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	makeCerts(t, a)
	makeCerts(t, b)
	crt, _ := os.ReadFile(filepath.Join(b, NodeCertFile))
	key, _ := os.ReadFile(filepath.Join(b, NodeKeyFile))
	_ = os.WriteFile(filepath.Join(a, NodeCertFile), crt, 0o644)
	_ = os.WriteFile(filepath.Join(a, NodeKeyFile), key, 0o600)
	if _, err := LoadNodeCerts(a); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("foreign node certificate: %v", err)
	}
}

func TestCreateRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	makeCerts(t, dir)
	o := CreateOptions{CertsDir: dir}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"no hosts", CreateNode(o, nil), "at least one host"},
		{"bad host", CreateNode(o, []string{"a b"}), "not allowed"},
		{"empty user", CreateClient(o, ""), "user name"},
		{"slash in user", CreateClient(o, "../x"), "user name"},
		{"node user", CreateClient(o, NodeUser), "create-node"},
		{"short validity", CreateClient(CreateOptions{CertsDir: dir, Validity: time.Minute}, "x"), "below the minimum"},
		{"no dir", CreateCA(CreateOptions{}), "--certs-dir"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, tc.err, tc.want)
		}
	}
}

// A certificate never outlives its CA.
func TestValidityCappedByCA(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	o := CreateOptions{CertsDir: dir, Validity: 48 * time.Hour, Now: func() time.Time { return now }}
	if err := CreateCA(o); err != nil {
		t.Fatal(err)
	}
	o.Validity = 0
	if err := CreateNode(o, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	nc, err := LoadNodeCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	if caEnd := now.Add(48 * time.Hour); nc.NotAfter.After(caEnd) {
		t.Fatalf("node certificate valid until %v, after its CA (%v)", nc.NotAfter, caEnd)
	}
}
