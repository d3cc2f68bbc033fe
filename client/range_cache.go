package client

import (
	"bytes"
	"sort"
	"sync"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// rangeEntry is one cached range descriptor. desc is immutable once the
// entry is created; a newer descriptor replaces the entry.
type rangeEntry struct {
	desc *rpcpb.RangeDescriptor
}

// contains reports whether k is in the entry's range. An empty end key
// means "unbounded" (the last range).
func (e *rangeEntry) contains(k []byte) bool {
	d := e.desc
	return bytes.Compare(k, d.GetStartKey()) >= 0 &&
		(len(d.GetEndKey()) == 0 || bytes.Compare(k, d.GetEndKey()) < 0)
}

// rangeCache caches range descriptors ordered by start key, and a
// leaseholder hint per range ID. It is filled by RangeLookup and corrected
// by the errors of requests (RANGE_KEY_MISMATCH carries the replica's
// current descriptor). It never asks the cluster anything itself.
//
// A sorted slice with binary search rather than a tree: lookups dominate,
// a cluster has at most a few thousand ranges, and splits (inserts) are
// rare. Stale entries are harmless: a request sent with one is refused
// (RANGE_KEY_MISMATCH, RANGE_NOT_FOUND) and the entry evicted.
type rangeCache struct {
	mu struct {
		sync.Mutex
		// entries are sorted by start key. Invariant: pairwise disjoint.
		entries []*rangeEntry
		// leaseholders maps range ID -> node ID believed to hold the lease.
		// Kept apart from entries so that it survives a descriptor refresh.
		leaseholders map[uint64]uint64
	}
}

func newRangeCache() *rangeCache {
	c := &rangeCache{}
	c.mu.leaseholders = map[uint64]uint64{}
	return c
}

// lookup returns the cached range containing k, or nil.
func (c *rangeCache) lookup(k []byte) *rangeEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.searchLocked(k)
	if i < 0 {
		return nil
	}
	if e := c.mu.entries[i]; e.contains(k) {
		return e
	}
	return nil
}

// searchLocked returns the index of the last entry whose start key is <= k,
// or -1.
func (c *rangeCache) searchLocked(k []byte) int {
	es := c.mu.entries
	i := sort.Search(len(es), func(i int) bool { return bytes.Compare(es[i].desc.GetStartKey(), k) > 0 })
	return i - 1
}

// insert adds desc, evicting the entries it overlaps, unless an overlapping
// entry of the same range has a newer generation (a stale lookup racing
// with a split). leaseholder, if not 0, becomes the range's hint.
func (c *rangeCache) insert(desc *rpcpb.RangeDescriptor, leaseholder uint64) *rangeEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if leaseholder != 0 {
		c.mu.leaseholders[desc.GetRangeId()] = leaseholder
	}
	start, end := desc.GetStartKey(), desc.GetEndKey()
	var keep []*rangeEntry
	for _, e := range c.mu.entries {
		overlaps := (len(end) == 0 || bytes.Compare(e.desc.GetStartKey(), end) < 0) &&
			(len(e.desc.GetEndKey()) == 0 || bytes.Compare(start, e.desc.GetEndKey()) < 0)
		if !overlaps {
			keep = append(keep, e)
			continue
		}
		if e.desc.GetRangeId() == desc.GetRangeId() && e.desc.GetGeneration() > desc.GetGeneration() {
			// Ours is stale; keep the cache as it is.
			return e
		}
	}
	ne := &rangeEntry{desc: desc}
	keep = append(keep, ne)
	sort.Slice(keep, func(i, j int) bool {
		return bytes.Compare(keep[i].desc.GetStartKey(), keep[j].desc.GetStartKey()) < 0
	})
	c.mu.entries = keep
	return ne
}

// evict removes e if it is still cached (a concurrent refresh may already
// have replaced it, and the replacement must stay).
func (c *rangeCache) evict(e *rangeEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.mu.entries {
		if x == e {
			c.mu.entries = append(c.mu.entries[:i:i], c.mu.entries[i+1:]...)
			return
		}
	}
}

// evictKey removes the entry containing k, if any.
func (c *rangeCache) evictKey(k []byte) {
	if e := c.lookup(k); e != nil {
		c.evict(e)
	}
}

func (c *rangeCache) leaseholder(rangeID uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.leaseholders[rangeID]
}

func (c *rangeCache) setLeaseholder(rangeID, nodeID uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if nodeID == 0 {
		delete(c.mu.leaseholders, rangeID)
		return
	}
	c.mu.leaseholders[rangeID] = nodeID
}

// clearLeaseholder forgets the hint for rangeID if it still names nodeID.
func (c *rangeCache) clearLeaseholder(rangeID, nodeID uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.leaseholders[rangeID] == nodeID {
		delete(c.mu.leaseholders, rangeID)
	}
}

// len is the number of cached ranges.
func (c *rangeCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.entries)
}
