package process

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/canopy-db/canopy/internal/testbin"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
)

// Deadlines for liveness waits. They are generous on purpose: the tests
// run beside others on small machines, and a deadline only turns "never"
// into a failure; it measures nothing.
const (
	waitMax = 60 * time.Second // one liveness wait (election, restart, catch-up)
	cliMax  = 60 * time.Second // one CLI invocation
	opMax   = 5 * time.Second  // one client call; failures are retried
	stopMax = 20 * time.Second // a SIGTERMed node to exit before SIGKILL
)

// binPath is the canopy binary TestMain built; skipWhy or buildErr say why
// there is none.
var (
	binPath  string
	skipWhy  string
	buildErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The nodes these tests start check their Puts' key cache against
	// the store (eval.VerifyKeyStatesForTesting).
	os.Setenv("CANOPY_VERIFY_KEY_STATES", "1")
	os.Exit(func() int {
		if os.Getenv(coordinatorEnv) != "" {
			// A coordinator process of a parallel-commit test: it needs no
			// canopy binary (parallel_commit_test.go).
			return m.Run()
		}
		if testing.Short() {
			skipWhy = "multi-process tests are skipped under -short"
			return m.Run()
		}
		var cleanup func()
		binPath, cleanup, skipWhy, buildErr = testbin.Build("canopy-process-bin-")
		defer cleanup()
		return m.Run()
	}())
}

func needBinary(t *testing.T) {
	t.Helper()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// node is one `canopy start` process slot: its flags stay the same across
// restarts.
type node struct {
	addr, store, logPath string
	// httpAddr is the node's --http-addr (metrics, health), a port
	// reserved with addr's.
	httpAddr string
	// args are extra flags of `canopy start`, set before a start.
	args   []string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
}

func (n *node) running() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// cluster is a set of node processes on loopback ports.
type cluster struct {
	t     *testing.T
	dir   string
	addrs []string
	nodes []*node
	// join, if set, is the --join list of every start (default: addrs).
	join []string
	// certsDir is the --certs-dir of the nodes and of every CLI command;
	// "" runs them all with --insecure.
	certsDir string
}

// newCluster reserves n free loopback ports, and one more for each node's
// HTTP server, and starts an insecure node on each. Its cleanup kills
// every process still running.
func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	return newClusterWith(t, n, nil)
}

// newClusterWith is newCluster with args as every node's extra flags of
// `canopy start` (node.args) from its first start.
func newClusterWith(t *testing.T, n int, args []string) *cluster {
	t.Helper()
	return newClusterOpts(t, n, args, "")
}

// newClusterCerts is newCluster with the nodes started with --certs-dir
// certsDir (and every CLI command run with it).
func newClusterCerts(t *testing.T, n int, certsDir string) *cluster {
	t.Helper()
	return newClusterOpts(t, n, nil, certsDir)
}

// securityArgs are the security flags of `canopy start`: --certs-dir, or
// --insecure.
func (c *cluster) securityArgs() []string {
	if c.certsDir == "" {
		return []string{"--insecure"}
	}
	return []string{"--certs-dir", c.certsDir}
}

// newClusterOpts is newClusterWith with the nodes and every CLI command
// run with --certs-dir certsDir, or --insecure if "".
func newClusterOpts(t *testing.T, n int, args []string, certsDir string) *cluster {
	t.Helper()
	dir := t.TempDir()
	c := &cluster{t: t, dir: dir, certsDir: certsDir}
	// Hold every listener until all ports are chosen, so none repeats.
	var ls []net.Listener
	var httpAddrs []string
	for i := 0; i < 2*n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		if i < n {
			c.addrs = append(c.addrs, l.Addr().String())
		} else {
			httpAddrs = append(httpAddrs, l.Addr().String())
		}
	}
	for _, l := range ls {
		_ = l.Close()
	}
	for i, a := range c.addrs {
		c.nodes = append(c.nodes, &node{
			addr:     a,
			httpAddr: httpAddrs[i],
			store:    filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			logPath:  filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)),
			args:     append([]string(nil), args...),
		})
	}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			if nd.running() {
				_ = nd.cmd.Process.Kill()
				<-nd.exited
			}
		}
		if keep := os.Getenv("CANOPY_TEST_KEEP_LOGS"); keep != "" {
			// For debugging: keep the nodes' logs after the test.
			for i, nd := range c.nodes {
				b, _ := os.ReadFile(nd.logPath)
				_ = os.WriteFile(filepath.Join(keep, fmt.Sprintf("%s-n%d.log", t.Name(), i+1)), b, 0o644)
			}
		}
		if t.Failed() {
			for i, nd := range c.nodes {
				b, _ := os.ReadFile(nd.logPath)
				lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
				t.Logf("last lines of node %d's log (%s):\n%s", i+1, nd.logPath, strings.Join(lines[max(0, len(lines)-40):], "\n"))
			}
		}
	})
	for i := range c.nodes {
		c.start(i)
	}
	return c
}

// start runs `canopy start` for node i with its fixed flags, appending its
// output to its log, and waits until it listens.
func (c *cluster) start(i int) {
	c.t.Helper()
	nd := c.spawn(i)
	// Liveness: the node accepts connections. (The port was free a moment
	// ago; on restart the killed process's listener is gone with it.)
	c.eventually(fmt.Sprintf("node %d listening on %s", i+1, nd.addr), func() error {
		if !nd.running() {
			return errors.New("the process exited")
		}
		conn, err := net.DialTimeout("tcp", nd.addr, time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err
	})
}

// spawn runs `canopy start` for node i with its fixed flags and nd.args,
// appending its output to its log; it does not wait.
func (c *cluster) spawn(i int) *node {
	c.t.Helper()
	nd := c.nodes[i]
	if nd.running() {
		c.t.Fatalf("node %d is already running", i+1)
	}
	f, err := os.OpenFile(nd.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer f.Close() // the child has its own descriptor
	fmt.Fprintf(f, "=== test: starting node %d at %s\n", i+1, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(binPath, "start", "--store", nd.store, "--listen", nd.addr,
		"--join", strings.Join(c.joinList(), ","), "--raft-tick", "50ms", "--http-addr", nd.httpAddr)
	cmd.Args = append(append(cmd.Args, c.securityArgs()...), nd.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("starting node %d: %v", i+1, err)
	}
	nd.cmd, nd.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(nd.exited)
	return nd
}

func (c *cluster) joinList() []string {
	if c.join != nil {
		return c.join
	}
	return c.addrs
}

// addSlot reserves ports for one more node (a new store, its --join the
// cluster's first addresses) and returns its slot; it does not start it.
func (c *cluster) addSlot(args []string) int {
	c.t.Helper()
	if c.join == nil {
		c.join = append([]string(nil), c.addrs...)
	}
	// Never a port of an earlier slot: a stopped node's ports are free
	// now and the OS may hand them out again, but that node may be
	// started again (a node 4 once got node 3's HTTP port, and node 3's
	// restart failed to bind it).
	used := map[string]bool{}
	for _, nd := range c.nodes {
		used[nd.addr], used[nd.httpAddr] = true, true
	}
	var ls []net.Listener
	for len(ls) < 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.t.Fatal(err)
		}
		if used[l.Addr().String()] {
			defer l.Close() // held until the others are chosen
			continue
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	i := len(c.nodes)
	c.addrs = append(c.addrs, ls[0].Addr().String())
	c.nodes = append(c.nodes, &node{
		addr:     ls[0].Addr().String(),
		httpAddr: ls[1].Addr().String(),
		store:    filepath.Join(c.dir, fmt.Sprintf("n%d", i+1)),
		logPath:  filepath.Join(c.dir, fmt.Sprintf("n%d.log", i+1)),
		args:     args,
	})
	return i
}

// kill9 kills node i with SIGKILL and waits for the process to be gone.
func (c *cluster) kill9(i int) {
	nd := c.nodes[i]
	if err := nd.cmd.Process.Kill(); err != nil {
		c.t.Fatalf("kill -9 node %d: %v", i+1, err)
	}
	<-nd.exited
}

// stop sends SIGTERM to node i and waits for a clean exit (SIGKILL after
// stopMax).
func (c *cluster) stop(i int) { c.stopWith(i, syscall.SIGTERM) }

// stopWith sends sig to node i and waits for a clean exit (SIGKILL after
// stopMax).
func (c *cluster) stopWith(i int, sig syscall.Signal) {
	nd := c.nodes[i]
	_ = nd.cmd.Process.Signal(sig)
	select {
	case <-nd.exited:
		if code := nd.cmd.ProcessState.ExitCode(); code != 0 {
			c.t.Errorf("node %d exited with code %d after %v", i+1, code, sig)
		}
	case <-time.After(stopMax):
		c.t.Errorf("node %d did not exit within %v of %v; killing it", i+1, stopMax, sig)
		c.kill9(i)
	}
}

// index returns the slot of the node at addr.
func (c *cluster) index(addr string) int {
	for i, a := range c.addrs {
		if a == addr {
			return i
		}
	}
	c.t.Fatalf("no node at %s", addr)
	return -1
}

func (c *cluster) hostFlag() string { return "--host=" + strings.Join(c.addrs, ",") }

// cli runs the canopy binary and returns its standard output; an error
// carries the standard error. The cluster's security (--certs-dir or
// --insecure) goes in the environment (CANOPY_CERTS_DIR, CANOPY_INSECURE),
// which only the commands that take those flags read.
func (c *cluster) cli(args ...string) (string, error) {
	env := "CANOPY_INSECURE=true"
	if c.certsDir != "" {
		env = "CANOPY_CERTS_DIR=" + c.certsDir
	}
	return c.cliEnv([]string{env}, args...)
}

// cliRaw runs the canopy binary with args alone.
func (c *cluster) cliRaw(args ...string) (string, error) { return c.cliEnv(nil, args...) }

// cliEnv runs the canopy binary with args and env added to the test's
// environment.
func (c *cluster) cliEnv(env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cliMax)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("canopy %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func (c *cluster) mustCLI(args ...string) string {
	c.t.Helper()
	out, err := c.cli(args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// eventually retries f until it returns nil, failing the test with f's
// last error after waitMax.
func (c *cluster) eventually(what string, f func() error) {
	c.t.Helper()
	deadline := time.Now().Add(waitMax)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: still failing after %v: %v", what, waitMax, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var liveRow = regexp.MustCompile(`(?m)^n\d+\s+\S+\s+live\s`)

// waitLive waits until `canopy status` shows want live nodes. With fewer
// live nodes than the cluster has, status exits with 7 (degraded): its
// output still counts.
func (c *cluster) waitLive(want int) string {
	c.t.Helper()
	var out string
	c.eventually(fmt.Sprintf("canopy status showing %d live nodes", want), func() error {
		var err error
		if out, err = c.cli("status", c.hostFlag()); err != nil && !strings.Contains(err.Error(), "exit status 7") {
			return err
		}
		if got := len(liveRow.FindAllString(out, -1)); got != want {
			return fmt.Errorf("%d live nodes in:\n%s", got, out)
		}
		return nil
	})
	return out
}

// ackedWrites records the writes the cluster acknowledged.
type ackedWrites struct {
	mu     sync.Mutex
	values map[string]string // key -> latest value acknowledged
	acks   int               // writes acknowledged
	// inFlight and inFlightValue are the write under way, which may or
	// may not have landed when the writer stops.
	inFlight, inFlightValue string
	failures                int // failed attempts (retried)
}

func (a *ackedWrites) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acks
}

// startWriter runs writer on db in the background and returns its
// acknowledged writes and stop, which stops the writer and waits for it
// (it may be called more than once).
func startWriter(t *testing.T, db *client.DB) (*ackedWrites, func()) {
	acked := &ackedWrites{values: map[string]string{}}
	stopCh, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); writer(t, db, acked, stopCh) }()
	var once sync.Once
	return acked, func() {
		once.Do(func() { close(stopCh) })
		<-done
	}
}

// waitAcked waits (for progress, not for a time) until a holds at least
// n acknowledged writes.
func (c *cluster) waitAcked(a *ackedWrites, what string, n int) {
	c.t.Helper()
	c.eventually(what, func() error {
		if got := a.count(); got < n {
			return fmt.Errorf("%d writes acknowledged, waiting for %d", got, n)
		}
		return nil
	})
}

// writerKeys is how many keys the writer cycles over: p/00000 to p/00249,
// all in one range (below the split at p/00300), so that every write goes
// to the range whose leaseholder is killed and its log grows long enough,
// while a replica is down, to be truncated past it.
const writerKeys = 250

// writer puts value-0, value-1, ... at p/00000, p/00001, ... (cycling over
// writerKeys keys) until stop is closed, retrying each write (same key and
// value) until it is acknowledged; every tenth write it reads back a key
// written a moment before, which must hold its acknowledged value.
func writer(t *testing.T, db *client.DB, a *ackedWrites, stop <-chan struct{}) {
	key := func(i int) string { return fmt.Sprintf("p/%05d", i%writerKeys) }
	for i := 0; ; i++ {
		k, v := key(i), fmt.Sprintf("value-%d", i)
		a.mu.Lock()
		a.inFlight, a.inFlightValue = k, v
		a.mu.Unlock()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), opMax)
			err := db.Put(ctx, []byte(k), []byte(v))
			cancel()
			if err == nil {
				break
			}
			a.mu.Lock()
			a.failures++
			a.mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
		a.mu.Lock()
		a.values[k], a.acks, a.inFlight = v, a.acks+1, ""
		a.mu.Unlock()
		if i%10 == 9 {
			// This goroutine is the only writer: the acknowledged value is
			// the latest.
			rk := key(i - 5)
			a.mu.Lock()
			want := a.values[rk]
			a.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), opMax)
			got, found, err := db.Get(ctx, []byte(rk))
			cancel()
			// An error is unavailability (retried later by other reads); a
			// wrong answer is a bug.
			if err == nil && (!found || string(got) != want) {
				t.Errorf("read %s = %q (found %v) after its write of %q was acknowledged", rk, got, found, want)
			}
		}
	}
}

// leaseholderOf returns the slot of the node holding the lease of the
// range containing the logical key k, once one is known.
// readBack checks (waiting for availability, not timing) that every key
// of acked reads back with its acknowledged value.
func (c *cluster) readBack(db *client.DB, when string, acked map[string]string) {
	c.t.Helper()
	for k, v := range acked {
		c.eventually(when+": read "+k, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), opMax)
			defer cancel()
			got, found, err := db.Get(ctx, []byte(k))
			if err == nil && (!found || string(got) != v) {
				c.t.Fatalf("%s: %q = %.20q (found %v), but %.20q was acknowledged", when, k, got, found, v)
			}
			return err
		})
	}
}

func leaseholderOf(c *cluster, db *client.DB, k []byte) (slot int, rangeID uint64) {
	c.t.Helper()
	c.eventually(fmt.Sprintf("the leaseholder of %q", k), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), opMax)
		defer cancel()
		info, err := db.ClusterInfo(ctx)
		if err != nil {
			return err
		}
		ranges, err := db.Ranges(ctx)
		if err != nil {
			return err
		}
		for _, r := range ranges {
			if !keys.Contains(r.Desc.StartKey, r.Desc.EndKey, k) {
				continue
			}
			for _, nd := range info.Nodes {
				if nd.NodeId == r.LeaseholderNodeID && r.LeaseholderNodeID != 0 {
					slot, rangeID = c.index(nd.Address), r.Desc.RangeId
					return nil
				}
			}
			return fmt.Errorf("range r%d has no known leaseholder yet", r.Desc.RangeId)
		}
		return errors.New("no range contains the key")
	})
	return slot, rangeID
}

// TestThreeProcessesKillLeaseholder runs a three-node cluster of real
// processes: CLI and client writes, kill -9 of the leaseholder of the range
// being written, writes and reads continuing once a new leader is elected,
// restart of the killed node with the same store and flags, and then a
// check that every acknowledged write is readable and that the restarted
// node rejoined with its data (the range's quorum then needs it); last,
// every node is killed at once and restarted, and nothing acknowledged is
// lost.
func TestThreeProcessesKillLeaseholder(t *testing.T) {
	needBinary(t)
	c := newCluster(t, 3)
	if out := c.mustCLI("init", "--host", c.addrs[0], "--initial-ranges", "4"); !strings.Contains(out, "initialized") {
		t.Fatalf("canopy init printed %q", out)
	}
	c.waitLive(3)

	// The CLI: put, get, split, scan, del.
	c.mustCLI("kv", "put", c.hostFlag(), "cli/a", "alpha")
	c.mustCLI("kv", "put", c.hostFlag(), "cli/b", "beta")
	if got := strings.TrimSpace(c.mustCLI("kv", "get", c.hostFlag(), "cli/a")); got != "alpha" {
		t.Fatalf("canopy kv get cli/a = %q, want alpha", got)
	}
	if out := c.mustCLI("admin", "split", c.hostFlag(), "p/00300"); !strings.Contains(out, "split at") {
		t.Fatalf("canopy admin split printed %q", out)
	}
	if got := c.mustCLI("kv", "scan", c.hostFlag(), "cli/", "cli0"); got != "cli/a\talpha\ncli/b\tbeta\n" {
		t.Fatalf("canopy kv scan cli/ cli0 printed %q", got)
	}
	c.mustCLI("kv", "del", c.hostFlag(), "cli/b")
	if _, err := c.cli("kv", "get", c.hostFlag(), "cli/b"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("canopy kv get of a deleted key: %v, want not found", err)
	}
	if out := c.waitLive(3); !strings.Contains(out, `"p/00300"`) {
		t.Fatalf("canopy status does not show the range split at p/00300:\n%s", out)
	}

	// The Go client writes p/00000 to p/00249, over and over, from here to
	// the end.
	ctx := context.Background()
	db, err := client.Open(ctx, c.addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	acked, stopWriter := startWriter(t, db)
	defer stopWriter()
	waitAcked := func(what string, n int) { t.Helper(); c.waitAcked(acked, what, n) }
	waitAcked("first writes", 50)

	// Kill -9 the leaseholder of the range being written (keys below
	// p/00300).
	killed, rangeID := leaseholderOf(c, db, keys.UserKey([]byte("p/00100")))
	t.Logf("kill -9 node %d (%s), leaseholder of r%d", killed+1, c.addrs[killed], rangeID)
	c.kill9(killed)
	atKill := acked.count()
	waitAcked("writes after the kill (a new leader elected)", atKill+50)
	c.eventually("canopy kv get cli/a with a node down", func() error {
		out, err := c.cli("kv", "get", c.hostFlag(), "cli/a")
		if err == nil && strings.TrimSpace(out) != "alpha" {
			t.Fatalf("canopy kv get cli/a = %q, want alpha", out)
		}
		return err
	})
	c.waitLive(2)
	// Enough writes that the range's log is truncated past the killed
	// replica (replica.Config.LogEntriesKeep, 500, after 1000 applied):
	// it will need a snapshot.
	waitAcked("writes while a node is down", atKill+1200)

	// Restart it with the same store and flags.
	c.start(killed)
	c.waitLive(3)
	waitAcked("writes after the restart", acked.count()+50)
	stopWriter()

	checkAcked := func(when string) {
		t.Helper()
		acked.mu.Lock()
		defer acked.mu.Unlock()
		c.readBack(db, when, acked.values)
	}
	checkAcked("after the restart")
	// The CLI's scan sees the same: every acknowledged key with its value
	// (or, for the key in flight when the writer stopped, the value in
	// flight), and no other key.
	out := c.mustCLI("kv", "scan", c.hostFlag(), "--limit", "100000", "p/", "p0")
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, "\t")
		want, ok := acked.values[k]
		switch {
		case k == acked.inFlight && v == acked.inFlightValue:
		case !ok:
			t.Errorf("canopy kv scan: unexpected key %q", k)
		case v != want:
			t.Errorf("canopy kv scan: %s = %q, want %q", k, v, want)
		}
		if ok {
			seen++
		}
	}
	if seen != len(acked.values) {
		t.Errorf("canopy kv scan shows %d of the %d acknowledged keys", seen, len(acked.values))
	}
	t.Logf("%d writes acknowledged (%d before the kill), %d attempts failed and were retried", acked.acks, atKill, acked.failures)

	// The restarted node rejoined with its data: once it has applied what
	// the range committed, stop another replica; the range's quorum is
	// then the restarted node and the third, and everything stays readable
	// and writable.
	c.eventually(fmt.Sprintf("node %d catching up on r%d", killed+1, rangeID), func() error {
		return caughtUp(db, c.addrs, killed, rangeID)
	})
	// The other node stopped is the leaseholder of the first range (the
	// meta records and the timestamp oracle) when that is not the
	// restarted node: writes then also need a new oracle leader.
	other, firstRange := leaseholderOf(c, db, keys.MinKey)
	if other == killed {
		other = (killed + 1) % 3
	}
	t.Logf("stopping node %d (SIGTERM; r%d's leaseholder was node %d); r%d's quorum now needs node %d", other+1, firstRange, other+1, rangeID, killed+1)
	c.stop(other)
	checkAcked("with the restarted node in the quorum")
	c.eventually("a write with the restarted node in the quorum", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), opMax)
		defer cancel()
		return db.Put(ctx, []byte("p/00000"), []byte("after the restart"))
	})
	acked.values["p/00000"] = "after the restart" // the writer has stopped
	c.start(other)
	c.waitLive(3)

	// Every node killed at once and restarted: what was acknowledged was
	// on disk (fsynced) in a quorum of stores.
	for i := range c.nodes {
		c.kill9(i)
	}
	for i := range c.nodes {
		c.start(i)
	}
	c.waitLive(3)
	checkAcked("after kill -9 of every node and restart")
}

// caughtUp reports nil once the replica of rangeID on node slot has
// applied at least the index its leader had committed when asked.
func caughtUp(db *client.DB, addrs []string, slot int, rangeID uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), opMax)
	defer cancel()
	committed := uint64(0)
	for _, a := range addrs {
		st, err := db.NodeStatus(ctx, a)
		if err != nil {
			continue
		}
		for _, r := range st.Ranges {
			if r.Range.GetRangeId() == rangeID && r.LeaderNodeId == st.NodeId {
				committed = r.RaftCommittedIndex
			}
		}
	}
	if committed == 0 {
		return fmt.Errorf("r%d has no leader", rangeID)
	}
	st, err := db.NodeStatus(ctx, addrs[slot])
	if err != nil {
		return err
	}
	for _, r := range st.Ranges {
		if r.Range.GetRangeId() == rangeID {
			if r.RaftAppliedIndex >= committed {
				return nil
			}
			return fmt.Errorf("applied %d of %d", r.RaftAppliedIndex, committed)
		}
	}
	return fmt.Errorf("node at %s has no replica of r%d", addrs[slot], rangeID)
}

// TestOneProcessRestartsWithItsData runs a single-node cluster (replication
// factor 1), so a restarted node has no peer to catch up from: what it
// serves after kill -9 and restart comes from its own store.
func TestOneProcessRestartsWithItsData(t *testing.T) {
	needBinary(t)
	c := newCluster(t, 1)
	c.mustCLI("init", "--host", c.addrs[0], "--initial-ranges", "2", "--replication-factor", "1")
	c.waitLive(1)
	ctx := context.Background()
	db, err := client.Open(ctx, c.addrs)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := 0; i < n; i++ {
		if err := db.Put(ctx, []byte(fmt.Sprintf("k/%04d", i)), []byte(fmt.Sprintf("v%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	c.mustCLI("kv", "put", c.hostFlag(), "cli", "written by the CLI")
	db.Close()

	c.kill9(0)
	c.start(0)
	c.waitLive(1)
	if got := strings.TrimSpace(c.mustCLI("kv", "get", c.hostFlag(), "cli")); got != "written by the CLI" {
		t.Fatalf("after restart: canopy kv get cli = %q", got)
	}
	db, err = client.Open(ctx, c.addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c.eventually("scan after restart", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), opMax)
		defer cancel()
		kvs, err := db.Scan(ctx, []byte("k/"), []byte("k0"), 0)
		if err != nil {
			return err
		}
		if len(kvs) != n {
			t.Fatalf("after restart: %d of %d keys", len(kvs), n)
		}
		for i, kv := range kvs {
			if string(kv.Key) != fmt.Sprintf("k/%04d", i) || string(kv.Value) != fmt.Sprintf("v%d", i) {
				t.Fatalf("after restart: key %d is %s = %s", i, kv.Key, kv.Value)
			}
		}
		return nil
	})
}
