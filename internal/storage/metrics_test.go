package storage

import (
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetrics checks the engine's collector: registered by Open on
// Options.Metrics, Pebble's and the value log's figures after writes, and
// nothing left, nor collected, after Close.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := testOpts(vfs.NewMem(), ModePunch)
	o.Metrics = reg
	e := mustOpen(t, "db", o)
	randomOps(t, e, rand.New(rand.NewPCG(1, 1)), map[string][]byte{}, 50, 20)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.Metric {
			got[f.GetName()] += m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	for _, name := range []string{"canopy_storage_wal_bytes_in_total", "canopy_storage_wal_bytes_written_total",
		"canopy_storage_disk_usage_bytes", "canopy_storage_memtable_bytes", "canopy_storage_wal_files",
		"canopy_vlog_written_bytes_total", "canopy_vlog_files"} {
		if got[name] <= 0 {
			t.Errorf("%s = %v, want > 0", name, got[name])
		}
	}
	for _, name := range []string{"canopy_storage_l0_files", "canopy_storage_compactions_total", "canopy_storage_block_cache_hit_ratio",
		"canopy_vlog_gc_punched_bytes_total", "canopy_vlog_gc_jobs_total", "canopy_storage_level_files"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no %s", name)
		}
	}
	if _, err := Open("db2", o); err == nil {
		t.Error("a second engine registered on the same registry")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if fams, err := reg.Gather(); err != nil || len(fams) != 0 {
		t.Errorf("after Close: %d metric families, %v", len(fams), err)
	}
	ch := make(chan prometheus.Metric, 100)
	e.metrics.Collect(ch) // a scrape that raced with Close
	if len(ch) != 0 {
		t.Errorf("a closed engine's collector reported %d metrics", len(ch))
	}
}
