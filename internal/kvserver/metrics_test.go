package kvserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// waitMax turns "never" into a failure; it measures nothing.
const waitMax = 60 * time.Second

// metricSum sums the samples of name in reg whose labels include want
// (pairs name, value): counters, gauges, and histograms' counts; 0 if reg
// has no such metric (a vector with no series yet).
func metricSum(t *testing.T, reg *prometheus.Registry, name string, want ...string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		v := 0.0
	metrics:
		for _, m := range f.Metric {
			for i := 0; i+1 < len(want); i += 2 {
				found := false
				for _, l := range m.Label {
					found = found || (l.GetName() == want[i] && l.GetValue() == want[i+1])
				}
				if !found {
					continue metrics
				}
			}
			v += m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
		return v
	}
	return 0
}

// waitFor retries f until it returns nil, failing with its last error
// after waitMax.
func waitFor(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(waitMax)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, waitMax, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHealthBeforeInit checks a node that was never initialized: /health
// is live, /health?ready=1 is 503 and says why, and the gRPC health
// service reports NOT_SERVING.
func TestHealthBeforeInit(t *testing.T) {
	n, err := kvserver.Start(kvserver.Config{StoreDir: filepath.Join(t.TempDir(), "n1"), ListenAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + n.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	if code, body := get("/health"); code != http.StatusOK || body != `{"status":"live","node_id":0}`+"\n" {
		t.Errorf("GET /health = %d %q", code, body)
	}
	if code, body := get("/health?ready=1"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"reason":"not initialized`) {
		t.Errorf("GET /health?ready=1 = %d %q, want 503 saying not initialized", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "canopy_ranges 0\n") {
		t.Errorf("GET /metrics = %d, without canopy_ranges 0:\n%s", code, body)
	}
	conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	for _, svc := range []string{"", "canopy.KV"} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("gRPC health of %q: %v, %v; want NOT_SERVING", svc, resp.GetStatus(), err)
		}
	}
}

// TestMetricsInProcess runs three nodes in the process: once ready, each
// node's range gauges agree with the cluster and writes show in the RPC,
// Raft and engine metrics; with a node stopped, the leaders count every
// range it held under-replicated, none unavailable, and the others stay
// ready.
func TestMetricsInProcess(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), InitialRanges: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := 0; i < 3; i++ {
		waitFor(t, fmt.Sprintf("n%d ready", i+1), func() error {
			if why := c.Node(i).Ready(); why != "" {
				return fmt.Errorf("%s", why)
			}
			return nil
		})
	}
	ctx := context.Background()
	db, err := client.Open(ctx, c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const writes = 10
	for i := 0; i < writes; i++ {
		if err := db.Put(ctx, []byte(fmt.Sprintf("k%02d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	ranges, err := db.Ranges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := func(name string, nodes int, labels ...string) float64 {
		v := 0.0
		for i := 0; i < nodes; i++ {
			v += metricSum(t, c.Node(i).Metrics(), name, labels...)
		}
		return v
	}
	for i := 0; i < 3; i++ {
		// Replication factor 3 on three nodes: every node holds every range.
		if got := metricSum(t, c.Node(i).Metrics(), "canopy_ranges"); got != float64(len(ranges)) {
			t.Errorf("n%d: canopy_ranges = %v, want %d", i+1, got, len(ranges))
		}
		for _, name := range []string{"canopy_raft_entries_applied_total", "canopy_raft_ready_round_duration_seconds", "canopy_storage_wal_bytes_written_total"} {
			if got := metricSum(t, c.Node(i).Metrics(), name); got <= 0 {
				t.Errorf("n%d: %s = %v, want > 0", i+1, name, got)
			}
		}
	}
	if got := total("grpc_server_handled_total", 3, "grpc_method", "Batch", "grpc_code", "OK"); got < writes {
		t.Errorf("Batch RPCs handled OK = %v, want at least %d", got, writes)
	}
	if got := total("canopy_kv_requests_total", 3, "method", "Put"); got != writes {
		t.Errorf("Put requests = %v, want %d", got, writes)
	}
	// Transaction decisions, each counted once over the nodes: a write to
	// two ranges commits by its status record, one handed to the commit
	// on one range by a one-phase commit, and an aborted one by its
	// status record.
	if err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		if err := txn.Put(ctx, []byte("a"), []byte("v")); err != nil {
			return err
		}
		return txn.Put(ctx, []byte("z"), []byte("v"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		return txn.CommitWith(ctx, client.Write{Key: []byte("b"), Value: []byte("v")})
	}); err != nil {
		t.Fatal(err)
	}
	abort := errors.New("roll back")
	if err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		if err := txn.Put(ctx, []byte("c"), []byte("v")); err != nil {
			return err
		}
		return abort
	}); !errors.Is(err, abort) {
		t.Fatalf("rolled-back transaction: %v", err)
	}
	waitFor(t, "the decisions counted", func() error {
		for _, d := range []struct {
			outcome, path string
			want          float64
		}{{"committed", "status_record", 1}, {"committed", "one_pc", 1}, {"aborted", "status_record", 1}} {
			if got := total("canopy_txn_decisions_total", 3, "outcome", d.outcome, "path", d.path); got != d.want {
				return fmt.Errorf("canopy_txn_decisions_total{outcome=%q,path=%q} = %v, want %v", d.outcome, d.path, got, d.want)
			}
		}
		return nil
	})
	waitFor(t, "one leaseholder per range, none under-replicated", func() error {
		if got := total("canopy_replicas_leaseholders", 3); got != float64(len(ranges)) {
			return fmt.Errorf("leaseholders %v, want %d", got, len(ranges))
		}
		if got := total("canopy_ranges_underreplicated", 3); got != 0 {
			return fmt.Errorf("%v under-replicated", got)
		}
		return nil
	})

	c.StopNode(2)
	waitFor(t, "every range under-replicated with n3 stopped", func() error {
		under, unavailable := total("canopy_ranges_underreplicated", 2), total("canopy_ranges_unavailable", 2)
		if under != float64(len(ranges)) || unavailable != 0 {
			return fmt.Errorf("under-replicated %v (want %d), unavailable %v (want 0)", under, len(ranges), unavailable)
		}
		for i := 0; i < 2; i++ {
			if why := c.Node(i).Ready(); why != "" {
				return fmt.Errorf("n%d not ready: %s", i+1, why)
			}
		}
		return nil
	})
}

// TestRestartOnSameRegistry checks that a node stopped and started again in
// the process can register its metrics on the same registry: Stop
// unregisters everything the node, its engine, scheduler and oracle
// registered.
func TestRestartOnSameRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := kvserver.Config{StoreDir: filepath.Join(t.TempDir(), "n1"), ListenAddr: "127.0.0.1:0", Metrics: reg, Insecure: true}
	for i := 0; i < 2; i++ {
		n, err := kvserver.Start(cfg)
		if err != nil {
			t.Fatalf("start %d: %v", i+1, err)
		}
		if got := metricSum(t, reg, "canopy_storage_wal_files"); got < 1 {
			t.Errorf("start %d: canopy_storage_wal_files = %v", i+1, got)
		}
		n.Stop()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if len(fams) != 0 {
			t.Fatalf("after Stop, the registry still has %d metric families, %s first", len(fams), fams[0].GetName())
		}
	}
}

// TestStatusMetricsFollowSchedule: after the cluster moves its status
// table from the bootstrap encoding (v1) to tickets, the status-table
// metrics read each record with the encoding in effect for its start
// timestamp: canopy_status_table_requests_total labels the new era's
// writes "tickets" and the old era's "v1", and
// canopy_txn_decisions_total counts the decisions of both eras.
func TestStatusMetricsFollowSchedule(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), InitialRanges: 3, StatusEncoding: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A short extension, so that the change takes effect soon.
	db, err := client.Open(ctx, c.Addrs(), client.WithOptions(client.Options{StatusScheduleExtension: 200 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	total := func(name string, labels ...string) float64 {
		v := 0.0
		for i := 0; i < 3; i++ {
			v += metricSum(t, c.Node(i).Metrics(), name, labels...)
		}
		return v
	}
	// Every decision a status record: no 1PC, no STAGING records.
	opts := []client.TxnOption{client.WithOnePC(false), client.WithParallelCommits(false)}
	abort := errors.New("roll back")
	run := func(era string, committed int) {
		for i := 0; i < committed; i++ {
			if err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
				if err := txn.Put(ctx, []byte(fmt.Sprintf("a-%s-%d", era, i)), []byte("v")); err != nil {
					return err
				}
				return txn.Put(ctx, []byte(fmt.Sprintf("z-%s-%d", era, i)), []byte("v"))
			}, opts...); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
			if err := txn.Put(ctx, []byte("c-"+era), []byte("v")); err != nil {
				return err
			}
			return abort
		}, opts...); !errors.Is(err, abort) {
			t.Fatalf("rolled-back transaction: %v", err)
		}
	}
	waitDecisions := func(committed, aborted float64) {
		t.Helper()
		waitFor(t, "the decisions counted", func() error {
			if got := total("canopy_txn_decisions_total", "outcome", "committed", "path", "status_record"); got != committed {
				return fmt.Errorf("committed by status record: %v, want %v", got, committed)
			}
			if got := total("canopy_txn_decisions_total", "outcome", "aborted", "path", "status_record"); got != aborted {
				return fmt.Errorf("aborted by status record: %v, want %v", got, aborted)
			}
			return nil
		})
	}
	const before, after = 3, 4
	run("v1", before)
	waitDecisions(before, 1)
	v1Writes := total("canopy_status_table_requests_total", "op", "write", "encoding", "v1")
	if v1Writes < before+1 {
		t.Fatalf("status writes labelled v1: %v, want at least %d", v1Writes, before+1)
	}
	s, err := db.SetStatusEncoding(ctx, "tickets")
	if err != nil {
		t.Fatal(err)
	}
	from := s.Eras[len(s.Eras)-1].From
	waitFor(t, "the oracle past the cutover", func() error {
		now, err := db.Timestamp(ctx)
		if err != nil {
			return err
		}
		if now <= from {
			return fmt.Errorf("oracle at %d, cutover %d", now, from)
		}
		return nil
	})
	run("tickets", after)
	waitDecisions(before+after, 2)
	if got := total("canopy_status_table_requests_total", "op", "write", "encoding", "tickets"); got < after+1 {
		t.Errorf("status writes labelled tickets: %v, want at least %d", got, after+1)
	}
	if got := total("canopy_status_table_requests_total", "op", "write", "encoding", "v1"); got != v1Writes {
		t.Errorf("status writes labelled v1: %v after the change, %v before; the new era's were labelled v1", got, v1Writes)
	}
	if got := total("canopy_status_table_requests_total", "encoding", "unknown"); got != 0 {
		t.Errorf("status requests of unknown encoding: %v", got)
	}
}

// TestHierarchyMetrics: a cluster running a hierarchy protocol counts its
// validators' work in the canopy_hierarchy_* metrics: a transaction on one
// key is a part taken by one leaf and a commit decided there.
func TestHierarchyMetrics(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), InitialRanges: 3, CommitProtocol: "hierarchy-locking"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := client.Open(ctx, c.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		return txn.Put(ctx, []byte("k"), []byte("v"))
	}); err != nil {
		t.Fatal(err)
	}
	total := func(name string, labels ...string) float64 {
		v := 0.0
		for i := 0; i < 3; i++ {
			v += metricSum(t, c.Node(i).Metrics(), name, labels...)
		}
		return v
	}
	if got := total("canopy_hierarchy_parts_total"); got < 1 {
		t.Errorf("canopy_hierarchy_parts_total = %v, want at least 1", got)
	}
	if got := total("canopy_hierarchy_decisions_total", "outcome", "committed"); got < 1 {
		t.Errorf("canopy_hierarchy_decisions_total{outcome=committed} = %v, want at least 1", got)
	}
	for _, name := range []string{"canopy_hierarchy_parts_recovered_total", "canopy_hierarchy_part_records_dropped_total"} {
		if got := total(name); got != 0 {
			t.Errorf("%s = %v, want 0 (nothing restarted, nothing lost)", name, got)
		}
	}
}
