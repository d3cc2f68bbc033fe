package client

import "sync"

// statusCache keeps the decisions of transactions (start_ts -> commit_ts, or
// txnstatus.Aborted) that this client has read in the status table or made
// itself. A decision is final (I1), so an entry never goes stale; only
// pending transactions are never cached. It is bounded by
// Options.StatusCacheEntriesMax, evicting the oldest entry first.
//
// Rejected: an LRU. Intents are met soon after their transaction decides,
// so the oldest decisions are also the least likely to be needed; FIFO
// needs no bookkeeping on a hit.
type statusCache struct {
	mu struct {
		sync.Mutex
		byStart map[uint64]uint64
		// order holds the cached start timestamps, oldest at next once
		// full (a ring). Invariant: len(byStart) <= len(order).
		order []uint64
		next  int
	}
	max int
}

func newStatusCache(max int) *statusCache {
	c := &statusCache{max: max}
	c.mu.byStart = map[uint64]uint64{}
	return c
}

// get returns the cached decision of the transaction started at startTs.
func (c *statusCache) get(startTs uint64) (commitTs uint64, ok bool) {
	if c.max <= 0 {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	commitTs, ok = c.mu.byStart[startTs]
	return commitTs, ok
}

// put records a decision (commitTs, or txnstatus.Aborted).
func (c *statusCache) put(startTs, commitTs uint64) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.mu.byStart[startTs]; ok {
		return
	}
	if len(c.mu.order) < c.max {
		c.mu.order = append(c.mu.order, startTs)
	} else {
		delete(c.mu.byStart, c.mu.order[c.mu.next])
		c.mu.order[c.mu.next] = startTs
		c.mu.next = (c.mu.next + 1) % c.max
	}
	c.mu.byStart[startTs] = commitTs
}

// len returns the number of cached decisions.
func (c *statusCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.byStart)
}
