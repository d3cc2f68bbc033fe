package process

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/clusterstatus"
	"github.com/canopy-db/canopy/internal/security"
)

// The status page in a real browser: Debian's chromium, headless.
//
// CANOPY_REQUIRE_CHROMIUM=1 (set by .ci/run, which installs chromium)
// turns a missing chromium into a failure; elsewhere the browser tests
// skip, saying so. CANOPY_STATUS_PAGE_SCREENSHOT=FILE copies the
// screenshot TestStatusPageInsecure takes to FILE (docs/status-page.png
// was made so).

// browserMax bounds one chromium run.
const browserMax = 2 * time.Minute

// chromiumPath returns the chromium binary, or skips (fails under
// CANOPY_REQUIRE_CHROMIUM) if there is none.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const why = "no chromium on PATH: the status page's browser test needs Debian's chromium package (apt-get install -y chromium)"
	if os.Getenv("CANOPY_REQUIRE_CHROMIUM") != "" {
		t.Fatal(why + ", and CANOPY_REQUIRE_CHROMIUM is set")
	}
	t.Skip(why)
	return ""
}

// chromium runs headless chromium on url with args (--dump-dom or
// --screenshot=FILE) after the page's scripts ran for budget of virtual
// time, and returns its standard output.
func chromium(t *testing.T, bin, url string, budget time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), browserMax)
	defer cancel()
	all := []string{"--headless", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--ignore-certificate-errors", // the test's CA is not the browser's
		"--user-data-dir=" + t.TempDir(), "--hide-scrollbars",
		fmt.Sprintf("--virtual-time-budget=%d", budget.Milliseconds())}
	if os.Geteuid() == 0 {
		all = append(all, "--no-sandbox") // chromium's sandbox refuses root
	}
	all = append(append(all, args...), url)
	cmd := exec.CommandContext(ctx, bin, all...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("chromium %s: %v: %s", strings.Join(all, " "), err, lastLines(stderr.String(), 10))
	}
	return stdout.String(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

var (
	domNodeRow  = regexp.MustCompile(`(?s)<tr data-node-id="(\d+)">(.*?)</tr>`)
	domRangeRow = regexp.MustCompile(`(?s)<tr data-range-id="(\d+)">(.*?)</tr>`)
	domCell     = regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`)
	domRendered = regexp.MustCompile(`data-status-rendered="\d+"`)
	domBanner   = regexp.MustCompile(`(?s)<div id="banner">(.*?)</div>`)
)

// domRows returns the cells of the rows re matches, by the row's ID.
func domRows(dom string, re *regexp.Regexp) map[string][]string {
	out := map[string][]string{}
	for _, m := range re.FindAllStringSubmatch(dom, -1) {
		var cells []string
		for _, c := range domCell.FindAllStringSubmatch(m[2], -1) {
			cells = append(cells, html.UnescapeString(c[1]))
		}
		out[m[1]] = cells
	}
	return out
}

// checkPage loads the page at url in chromium and checks that its node
// table lists exactly the cluster's nodes, live at their addresses, and
// its range table exactly the cluster's ranges with their spans (user keys
// as clusterstatus.HiddenKey if hidden) and replicas, and a leaseholder
// among them. The cluster is idle: it retries only while the page's view
// and the cluster's disagree (a leader still moving, the page not yet
// rendered).
func checkPage(t *testing.T, c *cluster, db *client.DB, bin, url string, hidden bool) {
	t.Helper()
	c.eventually("the status page in chromium showing the cluster's nodes and ranges", func() error {
		dom, err := chromium(t, bin, url, 10*time.Second, "--dump-dom")
		if err != nil {
			return err
		}
		if !domRendered.MatchString(dom) {
			if m := domBanner.FindStringSubmatch(dom); m != nil {
				return fmt.Errorf("the page did not render the status; its banner: %q", html.UnescapeString(m[1]))
			}
			return fmt.Errorf("the page did not render the status:\n%s", dom)
		}
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
		nodes := domRows(dom, domNodeRow)
		if len(nodes) != len(info.Nodes) {
			return fmt.Errorf("the page lists %d nodes, the cluster has %d", len(nodes), len(info.Nodes))
		}
		for _, nd := range info.Nodes {
			row := nodes[fmt.Sprint(nd.NodeId)]
			// Node, Address, State, Membership, Version, Uptime, Store size, Replicas, Leases.
			if len(row) != 9 || row[0] != fmt.Sprintf("n%d", nd.NodeId) || row[1] != nd.Address || row[2] != "live" || row[4] == "–" {
				return fmt.Errorf("node n%d at %s: the page's row is %q", nd.NodeId, nd.Address, row)
			}
		}
		rows := domRows(dom, domRangeRow)
		if len(rows) != len(ranges) {
			return fmt.Errorf("the page lists %d ranges, the cluster has %d", len(rows), len(ranges))
		}
		for _, ri := range ranges {
			d := ri.Desc
			row := rows[fmt.Sprint(d.RangeId)]
			// Range, Start, End, Replicas, Leaseholder, Size, Followers, State.
			if len(row) != 8 {
				return fmt.Errorf("r%d: the page's row is %q", d.RangeId, row)
			}
			start, end := clusterstatus.PrettyKey(d.StartKey, false), clusterstatus.PrettyKey(d.EndKey, false)
			if hidden {
				start, end = hide(start), hide(end)
			}
			var reps []string
			for _, r := range d.Replicas {
				reps = append(reps, fmt.Sprintf("n%d", r.NodeId))
			}
			if row[0] != fmt.Sprintf("r%d", d.RangeId) || row[1] != start || row[2] != end || row[3] != strings.Join(reps, ", ") ||
				!slices.Contains(reps, row[4]) || row[7] != "ok" {
				return fmt.Errorf("r%d [%s, %s) on %v: the page's row is %q", d.RangeId, start, end, reps, row)
			}
		}
		t.Logf("%s: the page shows the cluster's %d nodes and %d ranges", url, len(nodes), len(rows))
		return nil
	})
}

// seriesCommits returns the commits the /api/metrics series of the node at
// base counts, asked with hc: each point's rate times its interval (the sampler's ticker
// interval: about interval_seconds).
func seriesCommits(hc *http.Client, base string) (float64, error) {
	resp, err := hc.Get(base + "/api/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var m struct {
		IntervalSeconds float64 `json:"interval_seconds"`
		Points          []struct {
			Committed float64 `json:"committed_per_s"`
		} `json:"points"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return 0, err
	}
	committed := 0.0
	for _, p := range m.Points {
		committed += p.Committed * m.IntervalSeconds
	}
	return committed, nil
}

// hide is what a page without a client certificate shows for a key.
func hide(pretty string) string {
	if strings.HasPrefix(pretty, "/User/") {
		return clusterstatus.HiddenKey
	}
	return pretty
}

// TestStatusPageSecure starts three node processes with certificates made
// by `canopy cert`, as the README does, and checks the status page over
// HTTPS: /api/status (the report of `canopy status -o json`) lists the
// cluster's nodes and ranges, with user keys hidden from a request without
// a client certificate and shown to one with root's; the page in headless
// chromium shows the same nodes and ranges; and the charts' series
// follows a workload's transactions.
func TestStatusPageSecure(t *testing.T) {
	needBinary(t)
	bin := chromiumPath(t)
	dir := t.TempDir()
	certs, caKey := filepath.Join(dir, "certs"), filepath.Join(dir, "safe", "ca.key")
	c0 := &cluster{t: t}
	for _, args := range [][]string{
		{"cert", "create-ca", "--certs-dir", certs, "--ca-key", caKey},
		{"cert", "create-node", "127.0.0.1", "localhost", "--certs-dir", certs, "--ca-key", caKey},
		{"cert", "create-client", "root", "--certs-dir", certs, "--ca-key", caKey},
	} {
		if _, err := c0.cliRaw(args...); err != nil {
			t.Fatal(err)
		}
	}
	c := newClusterCerts(t, 3, certs)
	c.mustCLI("init", "--host", c.addrs[0], "--initial-ranges", "3")
	c.mustCLI("admin", "split", "m", c.hostFlag())
	c.waitLive(3)

	rootTLS, err := security.LoadClientTLS(certs, "root")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db, err := client.Open(ctx, c.addrs, client.WithOptions(client.Options{TLS: rootTLS}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// /api/status with and without a client certificate.
	caTLS, err := security.LoadCATLS(certs)
	if err != nil {
		t.Fatal(err)
	}
	anon := &http.Client{Timeout: opMax, Transport: &http.Transport{TLSClientConfig: caTLS}}
	root := &http.Client{Timeout: opMax, Transport: &http.Transport{TLSClientConfig: rootTLS}}
	base := "https://" + c.nodes[1].httpAddr
	getStatus := func(hc *http.Client) (*clusterstatus.JSON, error) {
		resp, err := hc.Get(base + "/api/status")
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET /api/status: %d %s", resp.StatusCode, b)
		}
		var st clusterstatus.JSON
		return &st, json.Unmarshal(b, &st)
	}
	c.eventually("/api/status with root's certificate showing the user keys", func() error {
		st, err := getStatus(root)
		if err != nil {
			return err
		}
		if st.KeysHidden || len(st.Nodes) != 3 || len(st.Problems) != 0 {
			return fmt.Errorf("report: keys hidden %v, %d nodes, problems %q", st.KeysHidden, len(st.Nodes), st.Problems)
		}
		for _, r := range st.Ranges {
			if r.Start == `/User/"m"` {
				return nil
			}
		}
		return fmt.Errorf("no range starts at /User/\"m\" (the split) in %+v", st.Ranges)
	})
	st, err := getStatus(anon)
	if err != nil {
		t.Fatal(err)
	}
	if !st.KeysHidden {
		t.Fatal("/api/status without a client certificate: keys_hidden is false")
	}
	for _, r := range st.Ranges {
		if strings.HasPrefix(r.Start, "/User/") && r.Start != clusterstatus.HiddenKey || r.StartKey != "" {
			t.Fatalf("/api/status without a client certificate shows a user key: %+v", r)
		}
	}
	// Plain HTTP to the HTTPS port is refused by the server.
	if resp, err := http.Get("http://" + c.nodes[1].httpAddr + "/api/status"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP to the HTTPS port: %d, want 400", resp.StatusCode)
		}
	}

	// Transactions over two ranges (a status record each): the charts'
	// series counts their commits on the leaseholders of the status
	// ranges.
	for i := 0; i < 20; i++ {
		k := fmt.Sprintf("k%02d", i)
		c.eventually("a transaction", func() error {
			cctx, ccancel := context.WithTimeout(ctx, opMax)
			defer ccancel()
			return db.Txn(cctx, func(ctx context.Context, txn *client.Txn) error {
				if err := txn.Put(ctx, []byte("a"+k), []byte("v")); err != nil {
					return err
				}
				return txn.Put(ctx, []byte("z"+k), []byte("v"))
			})
		})
	}
	c.eventually("/api/metrics of the nodes counting the commits", func() error {
		committed := 0.0
		for _, nd := range c.nodes {
			n, err := seriesCommits(anon, "https://"+nd.httpAddr)
			if err != nil {
				return err
			}
			committed += n
		}
		if committed < 15 {
			return fmt.Errorf("the nodes' series count %.1f commits, want about 20", committed)
		}
		return nil
	})

	// The page in chromium, over HTTPS without a client certificate.
	checkPage(t, c, db, bin, base+"/", true)
}

// TestStatusPageInsecure starts three insecure node processes, runs
// transactions, and checks the page in headless chromium over plain HTTP
// with the user keys shown, then takes its screenshot (a PNG of the
// window's size).
func TestStatusPageInsecure(t *testing.T) {
	needBinary(t)
	bin := chromiumPath(t)
	c := newCluster(t, 3)
	c.mustCLI("init", "--host", c.addrs[0], "--initial-ranges", "3")
	c.mustCLI("admin", "split", "m", c.hostFlag())
	c.waitLive(3)
	db := openClient(t, c)

	// Some traffic for the charts: transactions for a few sampling
	// intervals.
	ctx := context.Background()
	until := time.Now().Add(8 * time.Second)
	for i := 0; time.Now().Before(until) && i < 2000; i++ {
		k := fmt.Sprintf("k%04d", i%200)
		c.eventually("a transaction", func() error {
			cctx, cancel := context.WithTimeout(ctx, opMax)
			defer cancel()
			return db.Txn(cctx, func(ctx context.Context, txn *client.Txn) error {
				if _, _, err := txn.Get(ctx, []byte("a"+k)); err != nil {
					return err
				}
				if err := txn.Put(ctx, []byte("a"+k), []byte("v")); err != nil {
					return err
				}
				return txn.Put(ctx, []byte("z"+k), []byte("v"))
			})
		})
	}

	// Each node charts its own traffic: the screenshot shows the node that
	// recorded the most commits (as leaseholder of status ranges).
	url, most := "", -1.0
	for _, nd := range c.nodes {
		committed, err := seriesCommits(&http.Client{Timeout: opMax}, "http://"+nd.httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		if committed > most {
			url, most = "http://"+nd.httpAddr+"/", committed
		}
	}
	checkPage(t, c, db, bin, url, false)

	shot := filepath.Join(t.TempDir(), "status-page.png")
	if _, err := chromium(t, bin, url, 10*time.Second, "--window-size=1400,1200", "--screenshot="+shot); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil || cfg.Width != 1400 || cfg.Height != 1200 {
		t.Fatalf("screenshot %s: %v, %dx%d; want a 1400x1200 PNG", shot, err, cfg.Width, cfg.Height)
	}
	if dst := os.Getenv("CANOPY_STATUS_PAGE_SCREENSHOT"); dst != "" {
		b, err := os.ReadFile(shot)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot written to %s", dst)
	}
}
