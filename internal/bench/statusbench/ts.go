package statusbench

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/canopy-db/canopy/internal/txnstatus"
)

// Encoding returns the status-table encoding named "v1", "tickets" or
// "tickets-mix", with the default PQ and NP.
func Encoding(name string) (txnstatus.Encoding, error) { return txnstatus.Named(name, 0, 0) }

// logicalBits is the oracle's default: a timestamp is wall-clock
// milliseconds << 18 plus a counter (internal/tso).
const logicalBits = 18

// Txn is one synthetic transaction of the store experiments.
type Txn struct {
	Start, Commit uint64 // Commit is txnstatus.Aborted for an abort
}

// SyntheticTxns returns n transactions as an oracle would number them:
// start timestamps from a fixed day in 2026, each 2 to 64 above the last
// (the oracle hands out other timestamps in between: commits, reads), so
// start+1 is never a start (the misses of the latency experiment); commit
// timestamps 1 to 2^20 (4 ms) above the start; one in a hundred aborted.
func SyntheticTxns(n int, seed uint64) []Txn {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	base := uint64(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixMilli()) << logicalBits
	out := make([]Txn, n)
	ts := base
	for i := range out {
		ts += 2 + rng.Uint64N(63)
		t := Txn{Start: ts, Commit: ts + 1 + rng.Uint64N(1<<20)}
		if rng.IntN(100) == 0 {
			t.Commit = txnstatus.Aborted
		}
		out[i] = t
	}
	return out
}

// percentiles returns p50, p95 and p99 of samples (sorted in place).
func percentiles(samples []time.Duration) (p50, p95, p99 time.Duration) {
	if len(samples) == 0 {
		return 0, 0, 0
	}
	slices.Sort(samples)
	at := func(q float64) time.Duration { return samples[int(q*float64(len(samples)-1))] }
	return at(0.50), at(0.95), at(0.99)
}
