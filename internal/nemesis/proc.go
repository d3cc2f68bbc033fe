package nemesis

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// proc is one `canopy start` process of the cluster, by slot (0-based).
type proc struct {
	slot     int
	addr     string
	httpAddr string
	store    string
	logPath  string
	nodeID   uint64 // known once the cluster is initialized
	cmd      *exec.Cmd
	exited   chan struct{}
	paused   bool
}

// cluster is the nemesis's cluster of real processes.
type cluster struct {
	bin   string
	dir   string
	extra []string // extra flags of every `canopy start`
	procs []*proc
	addrs []string
	exits []nodeExit // processes that a fault stopped
	// cutter cuts the workload client off from nodes (KindClientCut).
	cutter *cutter
	// spareAddr, spareHTTP: the addresses of KindMembership's spare
	// node; spare is it while it runs, spares counts its stores.
	spareAddr, spareHTTP string
	spare                *proc
	spares               int
}

// nodeExit is a process that stopped by itself under a fault.
type nodeExit struct {
	slot int
	code int
	line string // the last line of its log
}

// lastLine returns the last non-empty line of the file at path.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return lines[len(lines)-1]
}

// newCluster reserves ports for n nodes (gRPC and HTTP) under dir.
func newCluster(bin, dir string, n int, extra []string) (*cluster, error) {
	c := &cluster{bin: bin, dir: dir, extra: extra}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var addrs []string
	for i := 0; i < 2*n+2; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	for i := 0; i < n; i++ {
		c.procs = append(c.procs, &proc{
			slot: i, addr: addrs[i], httpAddr: addrs[n+i],
			store:   filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			logPath: filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)),
		})
		c.addrs = append(c.addrs, addrs[i])
	}
	c.spareAddr, c.spareHTTP = addrs[2*n], addrs[2*n+1]
	return c, nil
}

func (p *proc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// start runs `canopy start` for slot i and waits until it listens.
func (c *cluster) start(ctx context.Context, i int) error {
	return c.startProc(ctx, c.procs[i], fmt.Sprintf("node %d", i+1))
}

// startProc runs `canopy start` for p (name: for messages) and waits
// until it listens.
func (c *cluster) startProc(ctx context.Context, p *proc, name string) error {
	if p.running() {
		return fmt.Errorf("%s is already running", name)
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "=== nemesis: starting %s at %s\n", name, time.Now().UTC().Format(time.RFC3339Nano))
	args := []string{"start", "--store", p.store, "--listen", p.addr,
		"--join", strings.Join(c.addrs, ","), "--http-addr", p.httpAddr, "--enable-fault-injection",
		// Nemesis clusters run on loopback, without TLS: the fault
		// endpoint and the clients speak plaintext.
		"--insecure"}
	args = append(args, c.extra...)
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p.cmd, p.exited, p.paused = cmd, make(chan struct{}), false
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(p.exited)
	for {
		if !p.running() {
			return fmt.Errorf("%s exited during start-up (log: %s)", name, p.logPath)
		}
		conn, err := net.DialTimeout("tcp", p.httpAddr, time.Second)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not listening: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill9 kills slot i with SIGKILL and waits for it to be gone.
func (c *cluster) kill9(i int) {
	p := c.procs[i]
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// signal sends sig to slot i's process.
func (c *cluster) signal(i int, sig syscall.Signal) error {
	p := c.procs[i]
	if !p.running() {
		return fmt.Errorf("node %d is not running", i+1)
	}
	return p.cmd.Process.Signal(sig)
}

// stopAll kills every process still running (resuming paused ones first,
// so that none is left stopped).
func (c *cluster) stopAll() {
	for _, p := range c.procs {
		c.stopProc(p)
	}
	if c.spare != nil {
		c.stopProc(c.spare)
	}
}

// stopProc stops p with SIGTERM (after a SIGCONT), or SIGKILL if it is
// still running 10 s later.
func (c *cluster) stopProc(p *proc) {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// cli runs the canopy binary with args.
func (c *cluster) cli(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = append(os.Environ(), "CANOPY_INSECURE=true") // see start
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("canopy %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// fault posts one /debug/fault request to slot i.
func (c *cluster) fault(ctx context.Context, i int, q url.Values) error {
	p := c.procs[i]
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	u := "http://" + p.httpAddr + "/debug/fault?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("node %d: /debug/fault: %w", i+1, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("node %d: /debug/fault?%s: %s: %s", i+1, q.Encode(), resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
