// Package latency records operation latencies and reports percentiles.
package latency

import (
	"sort"
	"sync"
	"time"
)

// SamplesMax bounds the samples a Recorder keeps per window; beyond it,
// reservoir sampling keeps a uniform sample.
const SamplesMax = 200_000

// Recorder collects latencies; safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	samples []time.Duration
	seen    int64
	rng     uint64
}

// Record adds one latency.
func (r *Recorder) Record(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen++
	if len(r.samples) < SamplesMax {
		r.samples = append(r.samples, d)
		return
	}
	r.rng = r.rng*6364136223846793005 + 1442695040888963407
	if j := int64(r.rng>>1) % r.seen; j < SamplesMax {
		r.samples[j] = d
	}
}

// Snapshot is a summary of recorded latencies.
type Snapshot struct {
	Count         int64
	P50, P99, Max time.Duration
}

// Take summarises the samples so far; reset clears them.
func (r *Recorder) Take(reset bool) Snapshot {
	r.mu.Lock()
	s := append([]time.Duration(nil), r.samples...)
	seen := r.seen
	if reset {
		r.samples, r.seen = r.samples[:0], 0
	}
	r.mu.Unlock()
	if len(s) == 0 {
		return Snapshot{}
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) time.Duration { return s[int(q*float64(len(s)-1))] }
	return Snapshot{Count: seen, P50: at(0.50), P99: at(0.99), Max: s[len(s)-1]}
}
