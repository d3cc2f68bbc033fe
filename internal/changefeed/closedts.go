package changefeed

import (
	"sync"
	"sync/atomic"
)

// Tracker follows the writes a leaseholder has in flight (evaluating, or
// proposed and not yet applied), each with the bound it registered: a
// timestamp the oracle handed out before the write took its own timestamp
// (see "Closed timestamps" in the package comment). Safe for concurrent
// use; the zero value is ready.
type Tracker struct {
	mu sync.Mutex
	// counts[bound] is the number of tracked writes with that bound.
	// Invariant: no zero counts.
	counts map[uint64]int
}

// Token is one tracked write.
type Token struct {
	t     *Tracker
	bound uint64
	done  atomic.Bool
}

// Track registers a write with bound (0 if no timestamp is known yet: the
// closed timestamp then stays 0 while the write is tracked). Call it
// before the write takes its timestamp.
func (t *Tracker) Track(bound uint64) *Token {
	t.mu.Lock()
	if t.counts == nil {
		t.counts = map[uint64]int{}
	}
	t.counts[bound]++
	t.mu.Unlock()
	return &Token{t: t, bound: bound}
}

// Done untracks the write: it applied (and its events were published) or
// will never apply. Later calls do nothing.
func (k *Token) Done() {
	if k == nil || k.done.Swap(true) {
		return
	}
	t := k.t
	t.mu.Lock()
	if t.counts[k.bound]--; t.counts[k.bound] == 0 {
		delete(t.counts, k.bound)
	}
	t.mu.Unlock()
}

// Closed returns the timestamp the leaseholder may close given candidate,
// a timestamp the oracle handed out (before this call) while no other
// leaseholder existed: min(candidate, every tracked bound).
func (t *Tracker) Closed(candidate uint64) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := candidate
	for b := range t.counts {
		if b < c {
			c = b
		}
	}
	return c
}

// Len returns the number of tracked writes.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.counts {
		n += c
	}
	return n
}
