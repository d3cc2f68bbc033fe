package statuspage

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestQuantileMillis checks the estimate against histogram_quantile's
// rule: linear inside the bucket holding the rank, the last finite bound
// for a rank in the +Inf bucket, nil for an empty histogram.
func TestQuantileMillis(t *testing.T) {
	inf := math.Inf(1)
	bounds := []float64{0.001, 0.01, 0.1, inf}
	for _, tc := range []struct {
		q    float64
		cum  []float64
		want float64 // ms; -1: nil
	}{
		{0.5, []float64{0, 0, 0, 0}, -1},
		{0.5, []float64{10, 10, 10, 10}, 0.5},      // all in (0, 1ms]: the middle
		{0.5, []float64{0, 10, 10, 10}, 5.5},       // all in (1ms, 10ms]
		{0.99, []float64{50, 100, 100, 100}, 9.82}, // rank 99 of the second bucket's 50
		{0.99, []float64{0, 0, 0, 10}, 100},        // beyond the last bound
	} {
		got := quantileMillis(tc.q, bounds, tc.cum)
		switch {
		case tc.want < 0 && got != nil:
			t.Errorf("q%v of %v = %v, want nil", tc.q, tc.cum, *got)
		case tc.want >= 0 && (got == nil || math.Abs(*got-tc.want) > 1e-9):
			t.Errorf("q%v of %v = %v, want %v", tc.q, tc.cum, got, tc.want)
		}
	}
}

// TestSamplerPoints feeds a registry with the node's metric names and
// checks the points: rates per second between samples, latency quantiles
// of the batches answered between them only, conflicts by code, and a
// restarted counter counted from zero.
func TestSamplerPoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	batches := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricBatches}, []string{"method", "code"})
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricRequests}, []string{"method"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricLatency, Buckets: []float64{0.001, 0.01, 0.1}}, []string{"method", "code"})
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricDecisions}, []string{"outcome", "path"})
	reg.MustRegister(batches, requests, latency, decisions)
	s := newSampler(reg, 3)
	t0 := time.Unix(1000, 0)

	// Before the first sample: slow batches, which the points must not see.
	for i := 0; i < 10; i++ {
		latency.WithLabelValues("Get", "OK").Observe(0.05)
	}
	s.sample(t0)
	if p := s.points(); len(p) != 0 {
		t.Fatalf("one sample gave %d points", len(p))
	}
	for i := 0; i < 20; i++ {
		batches.WithLabelValues("Get", "OK").Inc()
		requests.WithLabelValues("Get").Add(2)
		latency.WithLabelValues("Get", "OK").Observe(0.0005)
	}
	batches.WithLabelValues("PutIntent", "WRITE_CONFLICT").Add(4)
	batches.WithLabelValues("Get", "NOT_LEASEHOLDER").Add(6)
	decisions.WithLabelValues("committed", "status_record").Add(6)
	decisions.WithLabelValues("committed", "one_pc").Add(4)
	decisions.WithLabelValues("aborted", "status_record").Add(2)
	s.sample(t0.Add(2 * time.Second))
	ps := s.points()
	if len(ps) != 1 {
		t.Fatalf("two samples gave %d points", len(ps))
	}
	p := ps[0]
	if p.Batches != 15 || p.Requests != 20 || p.Conflicts != 2 || p.Committed != 5 || p.Aborted != 1 {
		t.Fatalf("point %+v: want 15 batches/s, 20 requests/s, 2 conflicts/s, 5 commits/s, 1 abort/s", p)
	}
	if p.P99Millis == nil || *p.P99Millis > 1 {
		t.Fatalf("p99 %v ms: want at most 1 ms (the slow batches came before the interval)", p.P99Millis)
	}
	if p.TimeUnixMillis != t0.Add(2*time.Second).UnixMilli() {
		t.Fatalf("point time %d", p.TimeUnixMillis)
	}

	// An idle interval: rates 0, no latency.
	s.sample(t0.Add(4 * time.Second))
	if p := s.points()[1]; p.Batches != 0 || p.P50Millis != nil {
		t.Fatalf("idle point %+v", p)
	}
	// The oldest sample goes beyond max.
	s.sample(t0.Add(6 * time.Second))
	if ps := s.points(); len(ps) != 2 || ps[0].TimeUnixMillis != t0.Add(4*time.Second).UnixMilli() {
		t.Fatalf("after max samples: %+v", ps)
	}

	// The node's metrics registered again (counters from zero).
	reg.Unregister(batches)
	batches = prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricBatches}, []string{"method", "code"})
	reg.MustRegister(batches)
	batches.WithLabelValues("Get", "OK").Add(8)
	s.sample(t0.Add(8 * time.Second))
	if p := s.points()[1]; p.Batches != 4 {
		t.Fatalf("after a reset: %v batches/s, want 4 (8 counted from zero over 2 s)", p.Batches)
	}
}
