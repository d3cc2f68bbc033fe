package client

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestRegisterMetrics checks that a DB's counters reach a Prometheus
// registry: commits, and retries by the reason of the failed attempt.
func TestRegisterMetrics(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	reg := prometheus.NewRegistry()
	if err := db.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if err := db.RegisterMetrics(reg); err == nil {
		t.Fatal("a second RegisterMetrics on the same registry succeeded")
	}
	attempts := 0
	err := db.Txn(bg, func(ctx context.Context, txn *Txn) error {
		attempts++
		if attempts == 1 {
			return &RetryableError{Reason: ReasonDeadlock, Msg: "test"}
		}
		return txn.Put(ctx, []byte("k"), []byte("v"))
	})
	if err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.Metric {
			name := f.GetName()
			for _, l := range m.Label {
				name += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			got[name] = counterValue(m)
		}
	}
	for name, want := range map[string]float64{
		"canopy_client_txn_commits_total":                       1,
		"canopy_client_txn_retries_total{reason=deadlock}":      1,
		"canopy_client_txn_retries_total{reason=read_conflict}": 0,
		"canopy_client_txn_retries_total{reason=other}":         0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present: %v), want %v", name, v, ok, want)
		}
	}
	closeAndCheckClean(t, c, db)
}

func counterValue(m *dto.Metric) float64 {
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.GetGauge().GetValue()
}
