package storage

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// This file exports the engine's metrics to Prometheus
// (docs/OPERATIONS.md, "Metrics and health"): Pebble's own (db.Metrics())
// and the value log's counters (BlobStats), read when the registry is
// scraped rather than copied on every write. Open registers the collector
// on Options.Metrics and Close unregisters it.

// collector is the engine's prometheus.Collector.
type collector struct {
	e *Engine
	// mu orders Collect against Close: Pebble's Metrics must not be read
	// from a closed DB.
	mu     sync.RWMutex
	closed bool // guarded by mu
}

// A metric: its descriptor and how to read it from one scrape's figures.
type engineMetric struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
	// value reads the metric; label values, if the metric has labels,
	// come from values.
	value  func(s *scrape) float64
	values func(s *scrape) []labeledValue
}

type labeledValue struct {
	labels []string
	v      float64
}

// scrape holds the figures read once per Collect.
type scrape struct {
	m     *pebble.Metrics
	blobs BlobStats
}

func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var walFsyncDesc = newDesc("canopy_storage_wal_fsync_duration_seconds", "Duration of Pebble's WAL fsyncs.")

var engineMetrics = []engineMetric{
	{desc: newDesc("canopy_storage_disk_usage_bytes", "Bytes of the store's files on disk (Pebble's tables, WAL, manifests, and value log files)."),
		kind: prometheus.GaugeValue, value: func(s *scrape) float64 { return float64(s.m.DiskSpaceUsage() + uint64(max(0, s.blobs.AllocatedBytes))) }},
	{desc: newDesc("canopy_storage_l0_files", "Pebble: SSTables in level 0 (many means writes outrun compactions)."),
		kind: prometheus.GaugeValue, value: func(s *scrape) float64 { return float64(s.m.Levels[0].TablesCount) }},
	{desc: newDesc("canopy_storage_l0_sublevels", "Pebble: sublevels of level 0."),
		kind: prometheus.GaugeValue, value: func(s *scrape) float64 { return float64(s.m.Levels[0].Sublevels) }},
	{desc: newDesc("canopy_storage_read_amplification", "Pebble: read amplification (L0 sublevels plus non-empty lower levels)."),
		kind: prometheus.GaugeValue, value: func(s *scrape) float64 { return float64(s.m.ReadAmp()) }},
	{desc: newDesc("canopy_storage_level_files", "Pebble: SSTables per level.", "level"),
		kind: prometheus.GaugeValue, values: func(s *scrape) []labeledValue {
			out := make([]labeledValue, len(s.m.Levels))
			for i := range s.m.Levels {
				out[i] = labeledValue{[]string{strconv.Itoa(i)}, float64(s.m.Levels[i].TablesCount)}
			}
			return out
		}},
	{desc: newDesc("canopy_storage_level_bytes", "Pebble: bytes of the SSTables per level.", "level"),
		kind: prometheus.GaugeValue, values: func(s *scrape) []labeledValue {
			out := make([]labeledValue, len(s.m.Levels))
			for i := range s.m.Levels {
				out[i] = labeledValue{[]string{strconv.Itoa(i)}, float64(s.m.Levels[i].TablesSize)}
			}
			return out
		}},
	{desc: newDesc("canopy_storage_compactions_total", "Pebble: compactions completed since the store opened."),
		kind: prometheus.CounterValue, value: func(s *scrape) float64 { return float64(s.m.Compact.Count) }},
	{desc: newDesc("canopy_storage_compactions_in_progress", "Pebble: compactions running."),
		kind: prometheus.GaugeValue, value: func(s *scrape) float64 { return float64(s.m.Compact.NumInProgress) }},
	{desc: newDesc("canopy_storage_compaction_debt_bytes", "Pebble: estimated bytes to compact for the LSM to reach a stable state."),
		kind: prometheus.GaugeValue, value: func(s *scrape) float64 { return float64(s.m.Compact.EstimatedDebt) }},
	{desc: newDesc("canopy_storage_flushes_total", "Pebble: memtable flushes since the store opened."),
		kind: prometheus.CounterValue, value: func(s *scrape) float64 { return float64(s.m.Flush.Count) }},
	{desc: newDesc("canopy_storage_memtable_bytes", "Pebble: bytes allocated by memtables."),
		kind: prometheus.GaugeValue, value: func(s *scrape) float64 { return float64(s.m.MemTable.Size) }},
	{desc: newDesc("canopy_storage_wal_bytes_in_total", "Pebble: logical bytes written to the WAL since the store opened."),
		kind: prometheus.CounterValue, value: func(s *scrape) float64 { return float64(s.m.WAL.BytesIn) }},
	{desc: newDesc("canopy_storage_wal_bytes_written_total", "Pebble: physical bytes written to the WAL (with record overhead) since the store opened."),
		kind: prometheus.CounterValue, value: func(s *scrape) float64 { return float64(s.m.WAL.BytesWritten) }},
	{desc: newDesc("canopy_storage_wal_files", "Pebble: live WAL files."),
		kind: prometheus.GaugeValue, value: func(s *scrape) float64 { return float64(s.m.WAL.Files) }},
	{desc: newDesc("canopy_storage_block_cache_hits_total", "Pebble: block cache hits since the store opened."),
		kind: prometheus.CounterValue, value: func(s *scrape) float64 { return float64(s.m.BlockCache.Hits) }},
	{desc: newDesc("canopy_storage_block_cache_misses_total", "Pebble: block cache misses since the store opened."),
		kind: prometheus.CounterValue, value: func(s *scrape) float64 { return float64(s.m.BlockCache.Misses) }},
	{desc: newDesc("canopy_storage_block_cache_hit_ratio", "Pebble: block cache hits / (hits + misses) since the store opened (0 before any lookup); for a rate over a window use the two counters."),
		kind: prometheus.GaugeValue, value: func(s *scrape) float64 {
			if t := s.m.BlockCache.Hits + s.m.BlockCache.Misses; t > 0 {
				return float64(s.m.BlockCache.Hits) / float64(t)
			}
			return 0
		}},
	{desc: newDesc("canopy_storage_block_cache_bytes", "Pebble: bytes in the block cache."),
		kind: prometheus.GaugeValue, value: func(s *scrape) float64 { return float64(s.m.BlockCache.Size) }},
	// The value log (ModeRewrite, ModePunch; zero in other modes unless
	// blob files remain from an earlier run in such a mode).
	{desc: newDesc("canopy_vlog_written_bytes_total", "Value log: bytes appended by writes (records and padding) since the store opened."),
		kind: prometheus.CounterValue, value: func(s *scrape) float64 { return float64(s.blobs.ForegroundWrittenBytes) }},
	{desc: newDesc("canopy_vlog_padding_bytes_total", "Value log: the padding part of canopy_vlog_written_bytes_total."),
		kind: prometheus.CounterValue, value: func(s *scrape) float64 { return float64(s.blobs.PaddingBytes) }},
	{desc: newDesc("canopy_vlog_gc_rewritten_bytes_total", "Value log GC: bytes appended by rewrite and merge jobs since the store opened."),
		kind: prometheus.CounterValue, value: func(s *scrape) float64 { return float64(s.blobs.GCRewrittenBytes) }},
	{desc: newDesc("canopy_vlog_gc_punched_bytes_total", "Value log GC: bytes deallocated by punching holes since the store opened."),
		kind: prometheus.CounterValue, value: func(s *scrape) float64 { return float64(s.blobs.GCPunchedBytes) }},
	{desc: newDesc("canopy_vlog_gc_jobs_total", "Value log GC: jobs run since the store opened, by kind (rewrite, punch).", "kind"),
		kind: prometheus.CounterValue, values: func(s *scrape) []labeledValue {
			return []labeledValue{{[]string{"rewrite"}, float64(s.blobs.GCRewriteJobs)}, {[]string{"punch"}, float64(s.blobs.GCPunchJobs)}}
		}},
	{desc: newDesc("canopy_vlog_files", "Value log: blob files."),
		kind: prometheus.GaugeValue, value: func(s *scrape) float64 { return float64(s.blobs.Files) }},
	{desc: newDesc("canopy_vlog_allocated_bytes", "Value log: bytes the blob files occupy on disk (punched holes excluded)."),
		kind: prometheus.GaugeValue, value: func(s *scrape) float64 { return float64(s.blobs.AllocatedBytes) }},
	{desc: newDesc("canopy_vlog_live_bytes", "Value log: record bytes still referenced (records minus discarded)."),
		kind: prometheus.GaugeValue, value: func(s *scrape) float64 { return float64(s.blobs.RecordBytes - s.blobs.DiscardBytes) }},
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range engineMetrics {
		ch <- m.desc
	}
	ch <- walFsyncDesc
}

// Collect implements prometheus.Collector. After Close it reports
// nothing.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return
	}
	s := &scrape{m: c.e.db.Metrics(), blobs: c.e.BlobStats()}
	for _, m := range engineMetrics {
		if m.values == nil {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, m.value(s))
			continue
		}
		for _, lv := range m.values(s) {
			ch <- prometheus.MustNewConstMetric(m.desc, m.kind, lv.v, lv.labels...)
		}
	}
	if h := s.m.LogWriter.FsyncLatency; h != nil {
		// Pebble's histogram has no name and counts nanoseconds: re-export
		// it in seconds.
		var pb dto.Metric
		if err := h.Write(&pb); err == nil && pb.Histogram != nil {
			buckets := make(map[float64]uint64, len(pb.Histogram.Bucket))
			for _, b := range pb.Histogram.Bucket {
				buckets[b.GetUpperBound()/1e9] = b.GetCumulativeCount()
			}
			ch <- prometheus.MustNewConstHistogram(walFsyncDesc, pb.Histogram.GetSampleCount(), pb.Histogram.GetSampleSum()/1e9, buckets)
		}
	}
}

// registerMetrics registers e's collector on Options.Metrics, if set.
func (e *Engine) registerMetrics() error {
	e.metrics = &collector{e: e}
	if e.opts.Metrics == nil {
		return nil
	}
	if err := e.opts.Metrics.Register(e.metrics); err != nil {
		return fmt.Errorf("storage: registering metrics: %w", err)
	}
	return nil
}

// unregisterMetrics stops the collector before the DB closes.
func (e *Engine) unregisterMetrics() {
	if e.metrics == nil {
		return
	}
	if e.opts.Metrics != nil {
		e.opts.Metrics.Unregister(e.metrics)
	}
	e.metrics.mu.Lock()
	e.metrics.closed = true
	e.metrics.mu.Unlock()
}
