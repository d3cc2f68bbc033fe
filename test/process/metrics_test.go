package process

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/client"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// httpGet fetches http://addr+path and returns the status code and body.
func httpGet(addr, path string) (int, string, error) {
	hc := http.Client{Timeout: opMax}
	resp, err := hc.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// grpcHealth asks the node at addr's grpc.health.v1 service for the
// server's status (service "").
func grpcHealth(addr string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), opMax)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return 0, err
	}
	return resp.Status, nil
}

// scrape is one node's /metrics, parsed.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(addr string) (scrape, error) {
	code, body, err := httpGet(addr, "/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d: %s", code, body)
	}
	var p expfmt.TextParser
	return p.TextToMetricFamilies(strings.NewReader(body))
}

// sum adds up the samples of the metric name whose labels include every
// label of want (pairs name, value), and says whether the metric exists.
func (s scrape) sum(name string, want ...string) (float64, bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
	total := 0.0
	for _, m := range f.Metric {
		match := true
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, l := range m.Label {
				if l.GetName() == want[i] && l.GetValue() == want[i+1] {
					found = true
				}
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			total += m.Untyped.GetValue()
		}
	}
	return total, true
}

// TestMetricsAndHealth runs three real nodes with --http-addr and checks
// what an operator's tools see: /health live and /health?ready=1 refused
// (503, with the reason) before `canopy init`, then ready, and the gRPC
// health service following; /metrics after some writes, with the series
// docs/OPERATIONS.md names and values that agree with the cluster (each
// node's range count is the ranges that list it as a replica, every range
// has one leaseholder); and, with one node stopped, the ranges it held
// counted under-replicated by their leaders while the others stay ready.
func TestMetricsAndHealth(t *testing.T) {
	needBinary(t)
	c := newCluster(t, 3)

	// Before init: live, not ready, over HTTP and gRPC.
	for i, nd := range c.nodes {
		c.eventually(fmt.Sprintf("node %d: GET /health", i+1), func() error {
			code, body, err := httpGet(nd.httpAddr, "/health")
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("%d %s", code, body)
			}
			return err
		})
		code, body, err := httpGet(nd.httpAddr, "/health?ready=1")
		if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "not initialized") {
			t.Fatalf("node %d before init: GET /health?ready=1 = %d %q, %v; want 503 naming init", i+1, code, body, err)
		}
		if st, err := grpcHealth(nd.addr); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("node %d before init: gRPC health %v, %v; want NOT_SERVING", i+1, st, err)
		}
	}

	c.mustCLI("init", "--host", c.addrs[0], "--initial-ranges", "3")
	for i, nd := range c.nodes {
		c.eventually(fmt.Sprintf("node %d ready", i+1), func() error {
			code, body, err := httpGet(nd.httpAddr, "/health?ready=1")
			if err == nil && (code != http.StatusOK || !strings.Contains(body, `"ready"`)) {
				err = fmt.Errorf("GET /health?ready=1: %d %s", code, body)
			}
			if err != nil {
				return err
			}
			if st, err := grpcHealth(nd.addr); err != nil || st != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("gRPC health %v, %v", st, err)
			}
			return nil
		})
	}

	// Some writes: plain puts and transactions.
	ctx := context.Background()
	db, err := client.Open(ctx, c.addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const writes = 20
	for i := 0; i < writes; i++ {
		k := []byte(fmt.Sprintf("m/%02d", i))
		c.eventually("a put", func() error {
			cctx, cancel := context.WithTimeout(ctx, opMax)
			defer cancel()
			return db.Put(cctx, k, []byte("v"))
		})
		c.eventually("a transaction", func() error {
			cctx, cancel := context.WithTimeout(ctx, opMax)
			defer cancel()
			return db.Txn(cctx, func(ctx context.Context, txn *client.Txn) error {
				if _, _, err := txn.Get(ctx, k); err != nil {
					return err
				}
				// Two ranges (the user keyspace is split at 0x55 and
				// 0xaa): no one-phase commit, a status record.
				if err := txn.Put(ctx, append([]byte("0"), k...), []byte("w")); err != nil {
					return err
				}
				return txn.Put(ctx, append(k, 't'), []byte("w"))
			})
		})
	}

	// slotOf maps node IDs to the test's slots.
	slotOf := map[uint64]int{}
	c.eventually("cluster info", func() error {
		cctx, cancel := context.WithTimeout(ctx, opMax)
		defer cancel()
		info, err := db.ClusterInfo(cctx)
		if err != nil {
			return err
		}
		for _, nd := range info.Nodes {
			slotOf[nd.NodeId] = c.index(nd.Address)
		}
		return nil
	})

	// The series exist and agree with the cluster. Range gauges move with
	// leadership, so they are compared until they agree.
	c.eventually("/metrics agreeing with the cluster", func() error {
		cctx, cancel := context.WithTimeout(ctx, opMax)
		defer cancel()
		ranges, err := db.Ranges(cctx)
		if err != nil {
			return err
		}
		held := make([]float64, len(c.nodes))
		for _, r := range ranges {
			for _, rd := range r.Desc.Replicas {
				held[slotOf[rd.NodeId]]++
			}
		}
		var scrapes []scrape
		for i, nd := range c.nodes {
			s, err := scrapeMetrics(nd.httpAddr)
			if err != nil {
				return fmt.Errorf("node %d: %w", i+1, err)
			}
			scrapes = append(scrapes, s)
			if got, _ := s.sum("canopy_ranges"); got != held[i] {
				return fmt.Errorf("node %d: canopy_ranges = %v, but %v ranges list it as a replica", i+1, got, held[i])
			}
			for _, name := range []string{"canopy_raft_entries_appended_total", "canopy_raft_entries_applied_total",
				"canopy_raft_log_sync_duration_seconds", "canopy_raft_ready_round_duration_seconds", "canopy_raft_scheduler_syncs_total",
				"canopy_storage_wal_bytes_written_total", "canopy_storage_disk_usage_bytes", "canopy_replicas",
				"go_goroutines", "process_resident_memory_bytes"} {
				if v, ok := s.sum(name); !ok || v <= 0 {
					return fmt.Errorf("node %d: %s = %v (present: %v), want > 0", i+1, name, v, ok)
				}
			}
			for _, name := range []string{"canopy_storage_l0_files", "canopy_storage_compactions_total",
				"canopy_storage_block_cache_hit_ratio", "canopy_vlog_written_bytes_total", "canopy_replicas_quiescent",
				"canopy_tso_batcher_batch_size", "canopy_tso_batcher_wait_seconds", "grpc_server_handling_seconds"} {
				if _, ok := s.sum(name); !ok {
					return fmt.Errorf("node %d: no %s", i+1, name)
				}
			}
		}
		total := func(name string, labels ...string) float64 {
			v := 0.0
			for _, s := range scrapes {
				x, _ := s.sum(name, labels...)
				v += x
			}
			return v
		}
		for _, x := range []struct {
			name   string
			labels []string
			min    float64
		}{
			{"grpc_server_handled_total", []string{"grpc_service", "canopy.KV", "grpc_method", "Batch", "grpc_code", "OK"}, 3 * writes},
			{"canopy_kv_batches_total", []string{"code", "OK"}, 3 * writes},
			{"canopy_kv_requests_total", []string{"method", "PutIntent"}, writes},
			{"canopy_status_table_requests_total", []string{"op", "write"}, writes},
			{"canopy_intents_resolved_total", nil, 1},
			{"canopy_raft_proposals_total", nil, 2 * writes},
			{"canopy_tso_oracle_requests_total", []string{"outcome", "ok"}, 1},
			{"canopy_replicas_leaseholders", nil, float64(len(ranges))},
		} {
			if got := total(x.name, x.labels...); got < x.min {
				return fmt.Errorf("%s%v summed over the nodes = %v, want at least %v", x.name, x.labels, got, x.min)
			}
		}
		if got := total("canopy_replicas_leaseholders"); got != float64(len(ranges)) {
			return fmt.Errorf("canopy_replicas_leaseholders summed = %v, want one per range (%d)", got, len(ranges))
		}
		for _, name := range []string{"canopy_ranges_underreplicated", "canopy_ranges_unavailable"} {
			if got := total(name); got != 0 {
				return fmt.Errorf("%s summed = %v with every node up", name, got)
			}
		}
		return nil
	})

	// One node stopped: its ranges are under-replicated as their leaders
	// see them, none is unavailable, and the others stay ready.
	c.stop(2)
	c.eventually("ranges under-replicated with node 3 down", func() error {
		cctx, cancel := context.WithTimeout(ctx, opMax)
		defer cancel()
		ranges, err := db.Ranges(cctx)
		if err != nil {
			return err
		}
		want := 0.0
		for _, r := range ranges {
			for _, rd := range r.Desc.Replicas {
				if slotOf[rd.NodeId] == 2 {
					want++
				}
			}
		}
		var under, unavailable float64
		for i := 0; i < 2; i++ {
			s, err := scrapeMetrics(c.nodes[i].httpAddr)
			if err != nil {
				return err
			}
			u, _ := s.sum("canopy_ranges_underreplicated")
			a, _ := s.sum("canopy_ranges_unavailable")
			under, unavailable = under+u, unavailable+a
			if code, body, err := httpGet(c.nodes[i].httpAddr, "/health?ready=1"); err != nil || code != http.StatusOK {
				return fmt.Errorf("node %d: GET /health?ready=1 = %d %s, %v", i+1, code, body, err)
			}
		}
		if under != want || unavailable != 0 {
			return fmt.Errorf("under-replicated %v (want %v), unavailable %v (want 0)", under, want, unavailable)
		}
		return nil
	})
}
