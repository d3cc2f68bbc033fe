package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/canopy-db/canopy/internal/testbin"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench/bank"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
)

// Bounds of the test: each step waits at most this long; none decides
// the outcome by its timing.
const (
	buildMax    = 10 * time.Minute // go build of the static binary (cold cache in CI)
	dockerMax   = 2 * time.Minute  // one docker or docker-compose command
	readyMax    = 2 * time.Minute  // init and every node healthy
	workloadMax = 90 * time.Second // transfers before and after the stop
	// transfersAfterStop must commit after the container is stopped.
	transfersAfterStop = 50
)

// skipWithoutDocker skips the test when Docker cannot run it here; with
// CANOPY_REQUIRE_DOCKER set (by .ci/run where docker and docker-compose
// are installed), it fails instead.
func skipWithoutDocker(t *testing.T) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CANOPY_REQUIRE_DOCKER") != "" {
		skip = func(format string, args ...any) {
			t.Fatalf(format+" (and CANOPY_REQUIRE_DOCKER is set: the test must run here)", args...)
		}
	}
	if testing.Short() {
		t.Skip("the Docker test is skipped under -short")
	}
	for _, bin := range []string{"docker", "docker-compose", "go"} {
		if _, err := exec.LookPath(bin); err != nil {
			skip("no %s on PATH: the Docker test needs docker, docker-compose and go", bin)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		skip("no Docker engine answers (docker info: %v: %s)", err, bytes.TrimSpace(out))
	}
}

// run runs a command within max and returns its combined output.
func run(t *testing.T, max time.Duration, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), max)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func mustRun(t *testing.T, max time.Duration, env []string, name string, args ...string) string {
	t.Helper()
	out, err := run(t, max, env, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func moduleRoot(t *testing.T) string {
	root, err := testbin.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// freePort returns a TCP port nothing listens on at the moment.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestComposeClusterSurvivesAStoppedContainer builds the image, starts
// docker-compose.yml's cluster, runs bank transfers, stops one node's
// container and checks that transfers go on and the total holds.
func TestComposeClusterSurvivesAStoppedContainer(t *testing.T) {
	skipWithoutDocker(t)
	root := moduleRoot(t)
	var id [4]byte
	_, _ = rand.Read(id[:])
	project := "canopytest" + hex.EncodeToString(id[:])
	image := project + ":test"
	ctxDir := t.TempDir()

	// The static binary and the repository's Dockerfile, in a build context
	// of their own (the checkout may hold a ./canopy of another build).
	start := time.Now()
	commit, _ := run(t, 10*time.Second, nil, "git", "-C", root, "rev-parse", "HEAD")
	mustRun(t, buildMax, []string{"CGO_ENABLED=0"}, "go", "build", "-C", root,
		"-ldflags", "-X github.com/canopy-db/canopy/internal/buildinfo.Commit="+strings.TrimSpace(commit),
		"-o", filepath.Join(ctxDir, "canopy"), "./cmd/canopy")
	for _, f := range []string{"Dockerfile", ".dockerignore"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ctxDir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("static binary built in %v", time.Since(start).Round(time.Second))

	compose := func(args ...string) []string {
		return append([]string{"-f", filepath.Join(root, "docker-compose.yml"), "-p", project}, args...)
	}
	httpPort1 := freePort(t)
	env := []string{"CANOPY_IMAGE=" + image,
		"CANOPY_HTTP_PORT_1=" + strconv.Itoa(httpPort1),
		"CANOPY_HTTP_PORT_2=" + strconv.Itoa(freePort(t)),
		"CANOPY_HTTP_PORT_3=" + strconv.Itoa(freePort(t))}
	// Cleanup first, so that it runs however the test ends: containers,
	// the project's network and volumes, and the image.
	t.Cleanup(func() {
		if t.Failed() {
			if out, err := run(t, dockerMax, env, "docker-compose", compose("logs", "--no-color", "--tail", "30")...); err == nil {
				t.Logf("last lines of the containers' logs:\n%s", out)
			}
		}
		if _, err := run(t, dockerMax, env, "docker-compose", compose("down", "--volumes", "--remove-orphans", "--timeout", "5")...); err != nil {
			t.Errorf("cleaning up: %v", err)
		}
		if _, err := run(t, dockerMax, nil, "docker", "image", "rm", "--force", image); err != nil {
			t.Errorf("cleaning up: %v", err)
		}
	})
	mustRun(t, dockerMax, nil, "docker", "build", "--quiet", "--tag", image, ctxDir)
	mustRun(t, dockerMax, env, "docker-compose", compose("up", "--detach", "--no-build")...)

	// Wait for the init service to finish and every node to be healthy
	// (its health check is `canopy health`: ready).
	containers := map[string]string{} // service -> container ID
	deadline := time.Now().Add(readyMax)
	for {
		var unready []string
		for _, svc := range []string{"init", "n1", "n2", "n3"} {
			cid := strings.TrimSpace(mustRun(t, dockerMax, env, "docker-compose", compose("ps", "-q", svc)...))
			containers[svc] = cid
			format := "{{.State.Health.Status}}"
			if svc == "init" {
				format = "{{.State.Status}} {{.State.ExitCode}}"
			}
			st := strings.TrimSpace(mustRun(t, dockerMax, nil, "docker", "inspect", "--format", format, cid))
			switch {
			case svc == "init" && strings.HasPrefix(st, "exited") && st != "exited 0":
				out, _ := run(t, dockerMax, env, "docker-compose", compose("logs", "--no-color", "init")...)
				t.Fatalf("canopy init failed (%s):\n%s", st, out)
			case svc == "init" && st != "exited 0", svc != "init" && st != "healthy":
				unready = append(unready, svc+": "+st)
			}
		}
		if len(unready) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ready after %v: %s", readyMax, strings.Join(unready, ", "))
		}
		time.Sleep(time.Second)
	}
	t.Logf("cluster initialized and healthy %v after the start", time.Since(start).Round(time.Second))

	// The status command runs in a container too, and says all is well.
	out := mustRun(t, dockerMax, env, "docker-compose", compose("exec", "-T", "n1", "/canopy", "status")...)
	if strings.Count(out, " live ") != 3 {
		t.Fatalf("canopy status in n1's container, want 3 live nodes:\n%s", out)
	}

	// The status page, on n1's HTTP port published on the host: the page,
	// and its report listing the three nodes, live.
	page := fmt.Sprintf("http://127.0.0.1:%d", httpPort1)
	if code, body := httpGet(t, page+"/"); code != http.StatusOK || !strings.Contains(body, "/assets/app.js") {
		t.Fatalf("GET %s/: %d %.200s", page, code, body)
	}
	deadline = time.Now().Add(readyMax)
	for {
		code, body := httpGet(t, page+"/api/status")
		var st struct {
			Nodes []struct {
				Address string `json:"address"`
				Live    bool   `json:"live"`
			} `json:"nodes"`
		}
		live := 0
		if code == http.StatusOK && json.Unmarshal([]byte(body), &st) == nil {
			for _, n := range st.Nodes {
				if n.Live {
					live++
				}
			}
		}
		if live == 3 && len(st.Nodes) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s/api/status: %d %.500s; want the three nodes live", page, code, body)
		}
		time.Sleep(time.Second)
	}

	// The client runs here: the nodes advertise n1:26257..n3:26257, names
	// the project's network resolves for containers only, so the client
	// resolves them to the containers' addresses on that network.
	ips := map[string]string{}
	for _, svc := range []string{"n1", "n2", "n3"} {
		ip := strings.TrimSpace(mustRun(t, dockerMax, nil, "docker", "inspect", "--format",
			"{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", containers[svc]))
		if net.ParseIP(ip) == nil {
			t.Fatalf("container %s: no IP address (%q)", svc, ip)
		}
		ips[svc] = ip
	}
	ctx, cancel := context.WithTimeout(context.Background(), workloadMax+readyMax)
	defer cancel()
	db, err := client.Open(ctx, []string{"n1:26257", "n2:26257", "n3:26257"},
		client.WithDialOptions(grpc.WithResolvers(hostsResolver{ips})))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := bank.New(db, bank.Options{Accounts: 100})
	if err := b.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(w), 7))
			for wctx.Err() == nil {
				_ = b.Transfer(wctx, rng) // failures are counted by the bank
			}
		}()
	}
	defer func() { stopWork(); wg.Wait() }()
	waitCommits := func(what string, want int64) {
		t.Helper()
		deadline := time.Now().Add(workloadMax)
		for {
			if c, _ := b.Counts(); c >= want {
				return
			}
			if time.Now().After(deadline) {
				c, f := b.Counts()
				t.Fatalf("%s: %d transfers committed (%d failed), want %d within %v", what, c, f, want, workloadMax)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitCommits("transfers with three nodes", transfersAfterStop)
	mustRun(t, dockerMax, env, "docker-compose", compose("stop", "--timeout", "5", "n3")...)
	atStop, _ := b.Counts()
	t.Logf("stopped n3's container after %d transfers", atStop)
	waitCommits("transfers after n3's container stopped", atStop+transfersAfterStop)
	stopWork()
	wg.Wait()
	committed, failed := b.Counts()
	t.Logf("%d transfers committed (%d after the stop), %d failed", committed, committed-atStop, failed)

	// Status, asked inside n1's container, now reports n3 and exits 7.
	out, err = run(t, dockerMax, env, "docker-compose", compose("exec", "-T", "n1", "/canopy", "status")...)
	if err == nil || !strings.Contains(err.Error(), "exit status 7") || !strings.Contains(out, "unreachable") {
		t.Errorf("canopy status with n3 stopped: want exit status 7 and n3 unreachable; got %v:\n%s", err, out)
	}
	total, err := b.Check(ctx)
	if err != nil {
		t.Fatalf("total balance: %v", err)
	}
	if total != b.Want() {
		t.Fatalf("total balance %d, want %d", total, b.Want())
	}
}

// hostsResolver resolves the nodes' advertised names (n1..n3) to their
// containers' addresses, for a client outside the containers' network.
type hostsResolver struct{ ips map[string]string }

func (hostsResolver) Scheme() string { return "dns" }

func (h hostsResolver) Build(target resolver.Target, cc resolver.ClientConn, _ resolver.BuildOptions) (resolver.Resolver, error) {
	host, port, err := net.SplitHostPort(target.Endpoint())
	if err != nil {
		return nil, err
	}
	ip, ok := h.ips[host]
	if !ok {
		return nil, fmt.Errorf("no container named %q", host)
	}
	err = cc.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: net.JoinHostPort(ip, port)}}})
	return nopResolver{}, err
}

type nopResolver struct{}

func (nopResolver) ResolveNow(resolver.ResolveNowOptions) {}
func (nopResolver) Close()                                {}

// httpGet returns a GET's status code and body (0 and the error if it
// failed).
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
