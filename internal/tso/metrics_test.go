package tso

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// value reads a counter, or a histogram's count.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		t.Fatal(err)
	}
	if pb.Histogram != nil {
		return float64(pb.Histogram.GetSampleCount())
	}
	return pb.GetCounter().GetValue()
}

// TestMetrics checks the oracle's and the batcher's counts: requests and
// their batch sizes, and the bound extensions (one persist serves many
// requests).
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Fatal("a second NewMetrics on the same registry succeeded")
	}
	o := New(Options{Metrics: m}, &MemPersister{})
	ctx := context.Background()
	for _, n := range []uint32{1, 4, 16} {
		if _, err := o.Allocate(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := o.Allocate(ctx, 0); err == nil {
		t.Fatal("Allocate(0) succeeded")
	}
	b := NewBatcher(8, func(n int) (uint64, error) { return o.Allocate(ctx, uint32(n)) })
	b.SetMetrics(m)
	for i := 0; i < 3; i++ {
		if _, err := b.Timestamp(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for name, x := range map[string]struct {
		c    prometheus.Metric
		want float64
	}{
		"oracle ok":        {m.oracleRequests.WithLabelValues("ok"), 6}, // 3 direct, 3 from the batcher (one caller at a time)
		"oracle error":     {m.oracleRequests.WithLabelValues("error"), 1},
		"extensions won":   {m.boundExtensions.WithLabelValues("won"), 1},
		"batcher requests": {m.batcherRequests, 3},
	} {
		if got := value(t, x.c); got != x.want {
			t.Errorf("%s = %v, want %v", name, got, x.want)
		}
	}
	if got := value(t, m.oracleBatchSize); got != 6 {
		t.Errorf("oracle batch sizes observed: %v, want 6", got)
	}
	m.ObserveBatcherWait(50 * time.Microsecond)
	m.ObserveBatcherWait(3 * time.Millisecond)
	if got := value(t, m.batcherWait); got != 2 {
		t.Errorf("batcher waits observed: %v, want 2", got)
	}
	(*Metrics)(nil).ObserveBatcherWait(time.Millisecond) // a nil Metrics counts nothing
	m.Unregister()
	if fams, err := reg.Gather(); err != nil || len(fams) != 0 {
		t.Errorf("after Unregister: %d metric families, %v", len(fams), err)
	}
}
