package statuspage

import (
	"math"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The metrics the charts read (internal/kvserver/metrics.go).
const (
	metricBatches   = "canopy_kv_batches_total"
	metricRequests  = "canopy_kv_requests_total"
	metricLatency   = "canopy_kv_batch_duration_seconds"
	metricDecisions = "canopy_txn_decisions_total"
)

// conflictCodes are the batch codes the charts count as conflicts: the
// answers that make a transaction wait, push or retry.
var conflictCodes = map[string]bool{"WRITE_CONFLICT": true, "READ_CONFLICT": true, "INTENT_FOUND": true, "DEADLOCK": true}

// sample is the metrics' cumulative values at one moment.
type sample struct {
	at                  time.Time
	batches, requests   float64
	committed, aborted  float64
	conflicts           float64
	latencyCount        float64
	bounds, cumulatives []float64 // the latency histogram, summed over its labels
}

// point is one point of /api/metrics: the rates and latency quantiles
// between two samples. A quantile is nil when no batch was answered.
type point struct {
	TimeUnixMillis int64    `json:"t"`
	Requests       float64  `json:"requests_per_s"`
	Batches        float64  `json:"batches_per_s"`
	P50Millis      *float64 `json:"p50_ms"`
	P99Millis      *float64 `json:"p99_ms"`
	Committed      float64  `json:"committed_per_s"`
	Aborted        float64  `json:"aborted_per_s"`
	Conflicts      float64  `json:"conflicts_per_s"`
}

// sampler keeps the last samples of a gatherer's metrics.
type sampler struct {
	g   prometheus.Gatherer
	max int

	mu      sync.Mutex
	samples []sample // oldest first, at most max
}

func newSampler(g prometheus.Gatherer, max int) *sampler { return &sampler{g: g, max: max} }

// sample gathers the metrics and keeps them as at's sample. A gathering
// error keeps nothing (the chart shows a gap).
func (s *sampler) sample(at time.Time) {
	if s.g == nil {
		return
	}
	mfs, err := s.g.Gather()
	if err != nil {
		return
	}
	smp := summarize(at, mfs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == s.max {
		s.samples = append(s.samples[:0], s.samples[1:]...)
	}
	s.samples = append(s.samples, smp)
}

// summarize reduces the gathered families to a sample.
func summarize(at time.Time, mfs []*dto.MetricFamily) sample {
	smp := sample{at: at}
	hist := map[float64]float64{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case metricBatches:
			for _, m := range mf.GetMetric() {
				v := m.GetCounter().GetValue()
				smp.batches += v
				if conflictCodes[label(m, "code")] {
					smp.conflicts += v
				}
			}
		case metricRequests:
			for _, m := range mf.GetMetric() {
				smp.requests += m.GetCounter().GetValue()
			}
		case metricDecisions:
			for _, m := range mf.GetMetric() {
				switch label(m, "outcome") {
				case "committed":
					smp.committed += m.GetCounter().GetValue()
				case "aborted":
					smp.aborted += m.GetCounter().GetValue()
				}
			}
		case metricLatency:
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				smp.latencyCount += float64(h.GetSampleCount())
				for _, b := range h.GetBucket() {
					hist[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				}
			}
		}
	}
	for b := range hist {
		smp.bounds = append(smp.bounds, b)
	}
	sort.Float64s(smp.bounds)
	for _, b := range smp.bounds {
		smp.cumulatives = append(smp.cumulatives, hist[b])
	}
	if len(smp.bounds) > 0 {
		// client_golang lists finite bounds only: the +Inf bucket holds
		// every batch.
		smp.bounds = append(smp.bounds, math.Inf(1))
		smp.cumulatives = append(smp.cumulatives, smp.latencyCount)
	}
	return smp
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// points returns a point for each pair of consecutive samples.
func (s *sampler) points() []point {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []point{}
	for i := 1; i < len(s.samples); i++ {
		out = append(out, between(s.samples[i-1], s.samples[i]))
	}
	return out
}

// between computes the point from a to b. A counter that went down (the
// node's metrics were registered again) counts from zero.
func between(a, b sample) point {
	dt := b.at.Sub(a.at).Seconds()
	if dt <= 0 {
		dt = math.SmallestNonzeroFloat64
	}
	rate := func(x, y float64) float64 {
		if y < x {
			return y / dt
		}
		return (y - x) / dt
	}
	p := point{TimeUnixMillis: b.at.UnixMilli(),
		Requests: rate(a.requests, b.requests), Batches: rate(a.batches, b.batches),
		Committed: rate(a.committed, b.committed), Aborted: rate(a.aborted, b.aborted),
		Conflicts: rate(a.conflicts, b.conflicts)}
	// The histogram of the batches answered between a and b.
	var cum []float64
	reset := b.latencyCount < a.latencyCount || !sameBounds(a.bounds, b.bounds)
	for i, c := range b.cumulatives {
		if !reset {
			c -= a.cumulatives[i]
		}
		cum = append(cum, c)
	}
	p.P50Millis = quantileMillis(0.5, b.bounds, cum)
	p.P99Millis = quantileMillis(0.99, b.bounds, cum)
	return p
}

func sameBounds(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// quantileMillis estimates the q-quantile, in milliseconds, of a
// histogram of seconds given by its buckets' upper bounds and cumulative
// counts, as Prometheus's histogram_quantile does: linear within the
// bucket holding the rank; the last finite bound if the rank falls in the
// +Inf bucket (the last). nil if the histogram is empty.
func quantileMillis(q float64, bounds, cum []float64) *float64 {
	if len(bounds) == 0 {
		return nil
	}
	total := cum[len(cum)-1]
	if total <= 0 {
		return nil
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, ub := range bounds {
		if cum[i] >= rank {
			v := ub
			if !math.IsInf(ub, 1) && cum[i] > below {
				v = lower + (ub-lower)*(rank-below)/(cum[i]-below)
			} else if math.IsInf(ub, 1) {
				v = lower
			}
			ms := v * 1000
			return &ms
		}
		lower, below = ub, cum[i]
	}
	ms := lower * 1000
	return &ms
}
