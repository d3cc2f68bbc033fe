package tso

import (
	"context"
	"sync"
)

// Batcher hands out timestamps fetched from an oracle in batches: at most
// one fetch is in flight; callers that arrive meanwhile wait, and the next
// fetch asks for as many timestamps as there are waiters (at most
// BatchMax). Under load this turns N timestamp requests into about N/depth
// round trips, the batching the oracle's design relies on. Both the client
// (begin and commit timestamps) and a node (the timestamps of
// non-transactional writes it evaluates) use it.
//
// Every timestamp a caller receives was allocated by a fetch started after
// the caller asked, so it is greater than any timestamp handed out before
// the caller asked: the oracle's guarantee I4 carries over.
type Batcher struct {
	fetch    func(n int) (first uint64, err error)
	batchMax int
	// metrics: see SetMetrics (metrics.go); nil counts nothing.
	metrics *Metrics

	mu struct {
		sync.Mutex
		// waiting callers, in arrival order.
		waiting []chan batchResult
		// inFlight: a goroutine is running fetches for waiting callers.
		// Invariant: len(waiting) > 0 implies inFlight.
		inFlight bool
	}
}

type batchResult struct {
	ts  uint64
	err error
}

// NewBatcher returns a batcher that calls fetch for n (1 <= n <= batchMax)
// timestamps and expects first, first+1, ..., first+n-1. fetch runs on
// behalf of several callers, so no single caller's context may cancel it:
// it must bound itself.
func NewBatcher(batchMax int, fetch func(n int) (first uint64, err error)) *Batcher {
	if batchMax < 1 {
		batchMax = 1
	}
	return &Batcher{fetch: fetch, batchMax: batchMax}
}

// Timestamp returns a fresh timestamp, or the fetch's error, or ctx's
// error if ctx ends first (the timestamp is then simply not used).
func (b *Batcher) Timestamp(ctx context.Context) (uint64, error) {
	b.metrics.batcherRequest()
	ch := make(chan batchResult, 1)
	b.mu.Lock()
	b.mu.waiting = append(b.mu.waiting, ch)
	if !b.mu.inFlight {
		b.mu.inFlight = true
		go b.run()
	}
	b.mu.Unlock()
	select {
	case r := <-ch:
		return r.ts, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Waiting is the number of callers waiting for the next fetch.
func (b *Batcher) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.mu.waiting)
}

// run serves waiting callers until none is left.
func (b *Batcher) run() {
	for {
		b.mu.Lock()
		n := min(len(b.mu.waiting), b.batchMax)
		if n == 0 {
			b.mu.inFlight = false
			b.mu.Unlock()
			return
		}
		batch := b.mu.waiting[:n:n]
		b.mu.waiting = append([]chan batchResult(nil), b.mu.waiting[n:]...)
		b.mu.Unlock()

		b.metrics.batcherFetch(n)
		first, err := b.fetch(n)
		for i, ch := range batch {
			if err != nil {
				ch <- batchResult{err: err}
			} else {
				ch <- batchResult{ts: first + uint64(i)}
			}
		}
	}
}
