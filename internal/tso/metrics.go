package tso

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts the work of an Oracle and of the Batchers in front of it
// (docs/OPERATIONS.md, "Metrics and health"). One Metrics serves a node's
// oracle and its batcher: pass it in Options.Metrics and to
// Batcher.SetMetrics. A nil *Metrics counts nothing.
//
// The counting is no I/O and reads no clock, so the core stays
// deterministic with it.
type Metrics struct {
	reg prometheus.Registerer
	// oracleRequests: Allocate calls, by outcome (ok, error).
	oracleRequests *prometheus.CounterVec
	// oracleBatchSize: the count of timestamps of each successful Allocate
	// (one request serves a batch of callers).
	oracleBatchSize prometheus.Histogram
	// boundExtensions: persists of a new bound (CASBound calls), by
	// outcome (won, moved: another oracle had moved it, error).
	boundExtensions *prometheus.CounterVec
	// batcherRequests: timestamps asked of a Batcher.
	batcherRequests prometheus.Counter
	// batcherBatchSize: the count of timestamps of each Batcher fetch.
	batcherBatchSize prometheus.Histogram
	// batcherWait: how long a caller of the node's batcher waited for its
	// timestamp (ObserveBatcherWait: the caller measures it).
	batcherWait prometheus.Histogram
}

// BatchSizeBuckets are the buckets of the batch size histograms: 1
// doubling to 65,536 (DefaultAllocateCountMax).
var BatchSizeBuckets = prometheus.ExponentialBuckets(1, 2, 17)

// WaitBuckets are the buckets of the wait histogram, in seconds: 10 µs
// doubling to about 1.3 s.
var WaitBuckets = prometheus.ExponentialBuckets(10e-6, 2, 18)

// NewMetrics makes the metrics and registers them on reg (nil: counted,
// not registered). It fails if reg has them already.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reg: reg,
		oracleRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "canopy_tso_oracle_requests_total",
			Help: "Allocate requests served by the timestamp oracle hosted on this node (while it leads range 1), by outcome (ok, error)."}, []string{"outcome"}),
		oracleBatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "canopy_tso_oracle_batch_size",
			Help: "Timestamps handed out by one successful Allocate of the oracle on this node.", Buckets: BatchSizeBuckets}),
		boundExtensions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "canopy_tso_bound_extensions_total",
			Help: "Persists of the oracle's upper bound (a Raft write each), by outcome (won, moved, error)."}, []string{"outcome"}),
		batcherRequests: prometheus.NewCounter(prometheus.CounterOpts{Name: "canopy_tso_batcher_requests_total",
			Help: "Timestamps asked of this node's timestamp batcher (non-transactional writes evaluated here)."}),
		batcherBatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "canopy_tso_batcher_batch_size",
			Help: "Timestamps fetched from the oracle by one request of this node's batcher (the callers it served).", Buckets: BatchSizeBuckets}),
		batcherWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "canopy_tso_batcher_wait_seconds",
			Help: "How long a write evaluated on this node waited for its timestamp: a local allocation on the oracle's host, a call to the host elsewhere (waiting for the batch in flight included).", Buckets: WaitBuckets}),
	}
	for _, v := range []string{"ok", "error"} {
		m.oracleRequests.WithLabelValues(v)
	}
	for _, v := range []string{"won", "moved", "error"} {
		m.boundExtensions.WithLabelValues(v)
	}
	if reg == nil {
		return m, nil
	}
	cs := m.collectors()
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("tso: registering metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.oracleRequests, m.oracleBatchSize, m.boundExtensions, m.batcherRequests, m.batcherBatchSize, m.batcherWait}
}

// Unregister removes the metrics from the registerer NewMetrics was given.
func (m *Metrics) Unregister() {
	if m == nil || m.reg == nil {
		return
	}
	for _, c := range m.collectors() {
		m.reg.Unregister(c)
	}
}

func (m *Metrics) allocated(count uint32, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.oracleRequests.WithLabelValues("error").Inc()
		return
	}
	m.oracleRequests.WithLabelValues("ok").Inc()
	m.oracleBatchSize.Observe(float64(count))
}

func (m *Metrics) extended(outcome string) {
	if m != nil {
		m.boundExtensions.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) batcherRequest() {
	if m != nil {
		m.batcherRequests.Inc()
	}
}

func (m *Metrics) batcherFetch(n int) {
	if m != nil {
		m.batcherBatchSize.Observe(float64(n))
	}
}

// ObserveBatcherWait counts one caller's wait for a timestamp from the
// batcher, measured by the caller (the metrics read no clock).
func (m *Metrics) ObserveBatcherWait(d time.Duration) {
	if m != nil {
		m.batcherWait.Observe(d.Seconds())
	}
}

// SetMetrics makes b count its requests and fetches in m. Call it before
// b is used.
func (b *Batcher) SetMetrics(m *Metrics) { b.metrics = m }
