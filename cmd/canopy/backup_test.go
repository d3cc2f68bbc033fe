package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestCLIBackupRestoreDebugTxns runs debug txns, backup and restore as a
// user does, between two in-process clusters: the listing and its counts,
// the progress and summary lines, a used directory refused, a damaged
// backup refused with one line and the target untouched, a restore whose
// keys read back, and a second restore refused on the non-empty target.
func TestCLIBackupRestoreDebugTxns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clusters")
	}
	src, err := testcluster.Start(testcluster.Options{Nodes: 1, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := testcluster.Start(testcluster.Options{Nodes: 1, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	srcHost := []string{"CANOPY_HOST=" + src.Addrs()[0]}
	dstHost := []string{"CANOPY_HOST=" + dst.Addrs()[0]}
	last := func(s string) string {
		lines := strings.Split(strings.TrimSpace(s), "\n")
		return lines[len(lines)-1]
	}

	for _, kv := range [][2]string{{"alice", "10"}, {"bob", "20"}, {"carol", "30"}} {
		canopy(t, nil, srcHost, "kv", "put", kv[0], kv[1]).want(t, ExitOK, "kv put")
	}
	canopy(t, nil, srcHost, "txn", "put alice 9", "put zed 1").want(t, ExitOK, "txn")
	r := canopy(t, nil, srcHost, "debug", "txns", "--from", "0")
	r.want(t, ExitOK, "debug txns")
	if !strings.Contains(r.stdout, "committed") || !strings.Contains(last(r.stdout), "aborted 0") {
		t.Errorf("debug txns printed:\n%s", r.stdout)
	}

	dir := filepath.Join(t.TempDir(), "bk")
	r = canopy(t, nil, srcHost, "backup", dir)
	r.want(t, ExitOK, "backup")
	if !strings.HasPrefix(r.stdout, "backup of 4 keys") || !strings.HasPrefix(r.stderr, "backup: 4 keys") {
		t.Errorf("backup printed %q, progress %q", r.stdout, r.stderr)
	}
	r = canopy(t, nil, srcHost, "backup", dir)
	if r.code == ExitOK || !strings.Contains(last(r.stderr), "not empty") {
		t.Errorf("backup into a used directory: status %d, %q", r.code, r.stderr)
	}

	damaged := filepath.Join(t.TempDir(), "damaged")
	if err := os.Mkdir(damaged, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"MANIFEST", "data-000001.kv"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if name != "MANIFEST" {
			b[len(b)-1] ^= 1
		}
		if err := os.WriteFile(filepath.Join(damaged, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r = canopy(t, nil, dstHost, "restore", damaged)
	if r.code == ExitOK || !strings.HasPrefix(last(r.stderr), "error: ") || !strings.Contains(last(r.stderr), "does not match its checksum") {
		t.Errorf("restore of a damaged backup: status %d, %q", r.code, r.stderr)
	}
	if r = canopy(t, nil, dstHost, "kv", "scan"); strings.TrimSpace(r.stdout) != "" {
		t.Errorf("the refused restore wrote %q", r.stdout)
	}

	r = canopy(t, nil, dstHost, "restore", dir)
	r.want(t, ExitOK, "restore")
	if !strings.HasPrefix(r.stdout, "restored 4 keys") {
		t.Errorf("restore printed %q", r.stdout)
	}
	want := canopy(t, nil, srcHost, "kv", "scan").stdout
	if got := canopy(t, nil, dstHost, "kv", "scan").stdout; got != want || !strings.Contains(got, "alice") {
		t.Errorf("restored keys:\n%s\nwant:\n%s", got, want)
	}
	r = canopy(t, nil, dstHost, "restore", dir)
	if r.code == ExitOK || !strings.Contains(last(r.stderr), "not empty") {
		t.Errorf("restore into a non-empty cluster: status %d, %q", r.code, r.stderr)
	}
}
