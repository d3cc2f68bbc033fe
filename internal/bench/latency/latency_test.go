package latency

import (
	"testing"
	"time"
)

func TestPercentiles(t *testing.T) {
	var r Recorder
	for i := 100; i >= 1; i-- {
		r.Record(time.Duration(i) * time.Millisecond)
	}
	s := r.Take(true)
	if s.Count != 100 || s.P50 != 50*time.Millisecond || s.P99 != 99*time.Millisecond || s.Max != 100*time.Millisecond {
		t.Fatalf("got %+v", s)
	}
	if s := r.Take(false); s.Count != 0 {
		t.Fatalf("after reset: %+v", s)
	}
}

// TestReservoirBound: beyond SamplesMax the recorder keeps a bounded
// sample but counts every latency.
func TestReservoirBound(t *testing.T) {
	var r Recorder
	for i := 0; i < SamplesMax+1000; i++ {
		r.Record(time.Millisecond)
	}
	if len(r.samples) != SamplesMax {
		t.Fatalf("%d samples kept, want %d", len(r.samples), SamplesMax)
	}
	if s := r.Take(false); s.Count != SamplesMax+1000 || s.P50 != time.Millisecond {
		t.Fatalf("got %+v", s)
	}
}
