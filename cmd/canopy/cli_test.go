package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/testcluster"
)

// cliEnv makes the test binary run as canopy (TestMain), so that the
// tests below run the CLI as a separate process, as a user does, without
// building the binary.
const cliEnv = "CANOPY_CLI_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(cliEnv) == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// cliMax bounds one CLI run.
const cliMax = 2 * time.Minute

// result is one CLI run's outcome.
type result struct {
	stdout, stderr string
	code           int
}

// canopy runs the CLI with args, stdin and extra environment.
func canopy(t *testing.T, stdin io.Reader, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	// The clusters of these tests run insecure (testcluster).
	cmd.Env = append(append(os.Environ(), cliEnv+"=1", "CANOPY_INSECURE=true"), env...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(cliMax):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("canopy %s: still running after %v", strings.Join(args, " "), cliMax)
	}
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

func (r result) want(t *testing.T, code int, what string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit status %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
	if code != ExitOK && code != ExitDegraded && code != ExitInterrupted {
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		last := lines[len(lines)-1]
		if len(lines) < 2 || !strings.HasPrefix(lines[0], "usage: canopy") || !strings.HasPrefix(last, "error: ") {
			t.Fatalf("%s: stderr %q: want the usage line, then one error line", what, r.stderr)
		}
		if strings.Contains(r.stderr, "rpc error") || strings.Contains(r.stderr, "desc =") {
			t.Fatalf("%s: gRPC framing in the error: %s", what, r.stderr)
		}
	}
}

// TestCLIAgainstCluster runs the CLI as a user would against an in-process
// three-node cluster: outputs, exit statuses, values from standard input,
// scans that stop at their limit, txn quoting, the environment, status.
func TestCLIAgainstCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c, err := testcluster.Start(testcluster.Options{Nodes: 3, Dir: t.TempDir(), InitialRanges: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	host := []string{"CANOPY_HOST=" + strings.Join(c.Addrs(), ",")}

	r := canopy(t, nil, host, "kv", "put", "greeting", "hello world")
	r.want(t, ExitOK, "kv put")
	if r.stdout != "OK\n" {
		t.Errorf("kv put printed %q, want OK", r.stdout)
	}
	if r = canopy(t, nil, host, "kv", "get", "greeting"); r.stdout != "hello world\n" {
		t.Errorf("kv get printed %q", r.stdout)
	}
	canopy(t, nil, host, "kv", "get", "missing").want(t, ExitNotFound, "kv get of a missing key")
	r = canopy(t, nil, host, "kv", "del", "greeting")
	r.want(t, ExitOK, "kv del")
	if r.stdout != "1\n" {
		t.Errorf("kv del of an existing key printed %q, want 1", r.stdout)
	}
	if r = canopy(t, nil, host, "kv", "del", "greeting"); r.stdout != "0\n" {
		t.Errorf("kv del of a missing key printed %q, want 0", r.stdout)
	}

	// A value over the 128 KiB a command-line argument may hold, from
	// standard input; it reads back byte for byte.
	big := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16)
	canopy(t, bytes.NewReader(big), host, "kv", "put", "big", "-").want(t, ExitOK, "kv put big -")
	if r = canopy(t, nil, host, "kv", "get", "big"); r.stdout != string(big)+"\n" {
		t.Errorf("kv get big: %d bytes, want %d", len(r.stdout), len(big)+1)
	}
	canopy(t, nil, host, "kv", "put", "big").want(t, ExitInvalidArgument, "kv put without a value")

	// Keys with a newline and binary bytes, written through txn's quoting.
	r = canopy(t, nil, host, "txn", `put "k\n1" 'v with spaces'`, `put "k\xff" ''`, "put 'my key' x", `get 'my key'`)
	r.want(t, ExitOK, "txn with quotes")
	if !strings.Contains(r.stdout, "my key\tx\n") {
		t.Errorf("txn output: %q", r.stdout)
	}
	r = canopy(t, nil, host, "kv", "scan", "k", "l")
	if r.stdout != "\"k\\n1\"\tv with spaces\n\"k\\xff\"\t\n" {
		t.Errorf("kv scan table: %q", r.stdout)
	}
	if r = canopy(t, nil, host, "kv", "scan", "k", "l", "-o", "hex"); r.stdout != "6b0a31\t76207769746820737061636573\n6bff\t\n" {
		t.Errorf("kv scan hex: %q", r.stdout)
	}
	canopy(t, nil, host, "txn", "put a").want(t, ExitInvalidArgument, "txn with a bad operation")

	// A scan that stops at its limit says so and how to go on; going on
	// gives the next key.
	for i := range 5 {
		canopy(t, nil, host, "kv", "put", fmt.Sprintf("s/%d", i), "v").want(t, ExitOK, "put")
	}
	r = canopy(t, nil, host, "kv", "scan", "s/", "s0", "--limit", "2")
	if r.stdout != "s/0\tv\ns/1\tv\n" || !strings.Contains(r.stderr, "canopy kv scan --after 's/1' 's0' --limit 2") {
		t.Errorf("kv scan --limit 2: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r = canopy(t, nil, host, "kv", "scan", "--after", "s/1", "s0", "--limit", "2"); r.stdout != "s/2\tv\ns/3\tv\n" {
		t.Errorf("kv scan --after: %q", r.stdout)
	}
	if r = canopy(t, nil, host, "kv", "scan", "s/", "s0", "--limit", "0"); strings.Count(r.stdout, "\n") != 5 || r.stderr != "" {
		t.Errorf("kv scan --limit 0: %q %q", r.stdout, r.stderr)
	}
	r = canopy(t, nil, host, "kv", "scan", "s/", "s0", "--limit", "4", "-o", "json")
	var js struct {
		Count int
		More  bool
		After string
	}
	if err := json.Unmarshal([]byte(r.stdout), &js); err != nil || js.Count != 4 || !js.More || js.After != "cy8z" {
		t.Errorf("kv scan -o json: %+v, %v: %s", js, err, r.stdout)
	}

	// Connection flags: the flag wins over the environment; a bad value
	// in the environment is refused by name; an unreachable host is
	// "unavailable", without gRPC's text.
	canopy(t, nil, append(host, "CANOPY_TIMEOUT=soon"), "kv", "get", "s/1").want(t, ExitInvalidArgument, "bad CANOPY_TIMEOUT")
	canopy(t, nil, host, "kv", "get", "s/1", "--host", "127.0.0.1:1", "--dial-timeout", "500ms").want(t, ExitUnavailable, "unreachable --host")
	canopy(t, nil, host, "kv", "get", "--frob").want(t, ExitInvalidArgument, "unknown flag")
	canopy(t, nil, host, "kv", "gett").want(t, ExitInvalidArgument, "unknown subcommand")

	// Status: all well, then a node stopped.
	r = canopy(t, nil, host, "status")
	r.want(t, ExitOK, "status")
	for _, want := range []string{"/User", "VERSION", "STORE SIZE", " live "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status does not show %q:\n%s", want, r.stdout)
		}
	}
	c.StopNode(2)
	r = canopy(t, nil, host, "status", "-o", "json")
	r.want(t, ExitDegraded, "status with a node stopped")
	var st struct{ Problems []string }
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Problems) == 0 {
		t.Errorf("status -o json with a node stopped: %v %s", err, r.stdout)
	}

	// debug store on the stopped node's store changes no file.
	store := filepath.Join(c.Dir(), "n3")
	before := hashTree(t, store)
	r = canopy(t, nil, nil, "debug", "store", "--store", store)
	r.want(t, ExitOK, "debug store")
	if !strings.Contains(r.stdout, "node n3 of cluster") {
		t.Errorf("debug store: %s", r.stdout)
	}
	if after := hashTree(t, store); after != before {
		t.Errorf("debug store changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	canopy(t, nil, nil, "debug", "store", "--store", filepath.Join(c.Dir(), "n1")).want(t, ExitError, "debug store of a running node's store")
}

// hashTree lists every file under dir with its size, mode, modification
// time and SHA-256.
func hashTree(t *testing.T, dir string) string {
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		sum := ""
		if !d.IsDir() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum = fmt.Sprintf("%x", sha256.Sum256(data))
		}
		fmt.Fprintf(&b, "%s %d %v %d %s\n", p, fi.Size(), fi.Mode(), fi.ModTime().UnixNano(), sum)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestVersionAndHelp checks canopy version, --version and that --help
// lists the exit statuses.
func TestVersionAndHelp(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := canopy(t, nil, nil, args...)
		r.want(t, ExitOK, strings.Join(args, " "))
		for _, want := range []string{"canopy ", "commit: ", "go: go1."} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("canopy %s: %q lacks %q", args[0], r.stdout, want)
			}
		}
	}
	if r := canopy(t, nil, nil, "--help"); !strings.Contains(r.stdout, "Exit status:") || !strings.Contains(r.stdout, "ambiguous") {
		t.Errorf("canopy --help does not list the exit statuses:\n%s", r.stdout)
	}
}

// TestDemoInterrupted checks that demo, interrupted with SIGINT (Ctrl-C),
// stops its cluster, removes its temporary directory and exits 130.
func TestDemoInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "demo", "--duration", "2m", "--accounts", "20", "--concurrency", "2")
	cmd.Env = append(os.Environ(), cliEnv+"=1", "TMPDIR="+tmp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Interrupt once transfers run ("cluster up" is printed before them).
	var log strings.Builder
	sc := bufio.NewScanner(out)
	sc.Split(scanLinesOrCR)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "txn/s") {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, out)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(cliMax):
		t.Fatalf("demo still running %v after SIGINT; output:\n%s", cliMax, log.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != ExitInterrupted {
		t.Errorf("demo exited with %d after SIGINT, want %d", code, ExitInterrupted)
	}
	left, _ := os.ReadDir(tmp)
	if len(left) != 0 {
		t.Errorf("demo left %v in its temporary directory's parent %s", left, tmp)
	}
}

// scanLinesOrCR splits at \n or \r (demo redraws its progress line).
func scanLinesOrCR(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		return i + 1, data[:i], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}
