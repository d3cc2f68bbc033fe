package kvserver

import (
	"sync"

	"github.com/canopy-db/canopy/internal/eval"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/storage"
)

// keyStates is a replica's cache of keys known to have no intent, with
// their newest committed version (eval.KeyStates): a non-transactional Put
// of a cached key writes without reading the key first, which took 8.5% of
// a node's CPU on puts (docs/BENCHMARKS.md, session 19).
//
// It stays exact because every change to the range's data passes through
// the replica's state machine (rangeSM), which tells the cache:
//
//   - an applied command whose writes are all Sets of version keys (what
//     non-transactional Puts and one-phase commits write) raises the
//     newest version of each cached key it writes;
//   - anything else (an intent written or resolved, a version deleted, a
//     split, a snapshot, a configuration change, a command of any other
//     form) starts a new generation, which forgets every entry at once.
//
// An entry is used only in the generation it was noted in. A Put notes
// what it read under its key's write latch, so no command that writes the
// key applies between its read and its note; the generation it took
// before reading guards the note against the changes that do not latch
// (splits, snapshots, GC), which start a new generation whether or not
// the cache holds entries. The cache is consulted only for batches of Puts
// alone (Node.writeLatched), so no intent of the same batch can hide from
// it; the leaseholder is the only replica that notes, but every replica
// keeps generations, so a replica that gets the lease later starts from
// entries that are still exact or already forgotten.
type keyStates struct {
	mu  sync.Mutex
	gen uint64
	m   map[string]keyStateEntry
}

// keyStatesMax bounds the entries of one replica's cache; when it is
// full, the cache starts over.
const keyStatesMax = 1 << 16

type keyStateEntry struct {
	gen    uint64
	newest mvcc.Timestamp
}

var _ eval.KeyStates = (*keyStates)(nil)

// Gen implements eval.KeyStates.
func (c *keyStates) Gen() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Known implements eval.KeyStates.
func (c *keyStates) Known(key []byte) (mvcc.Timestamp, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[string(key)]
	if !ok || e.gen != c.gen {
		return 0, false
	}
	return e.newest, true
}

// Note implements eval.KeyStates.
func (c *keyStates) Note(key []byte, newest mvcc.Timestamp, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return // a command applied since: what was read may be stale
	}
	if e, ok := c.m[string(key)]; ok && e.gen == gen && e.newest > newest {
		newest = e.newest
	}
	if c.m == nil || len(c.m) >= keyStatesMax {
		c.m = map[string]keyStateEntry{}
	}
	c.m[string(key)] = keyStateEntry{gen: gen, newest: newest}
}

// forget starts a new generation: no entry is used again.
func (c *keyStates) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if len(c.m) > 0 {
		c.m = nil
	}
}

// applied tells the cache about the writes of an applied command, repr as
// the command carries them (storage.Batch.Repr).
func (c *keyStates) applied(eng *storage.Engine, repr []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) == 0 {
		// Nothing to keep exact (a follower's cache, always). A Put reading
		// meanwhile reads a key this command did not write (its latch keeps
		// such commands away), so its read stays exact too.
		return
	}
	err := eng.ReadRepr(repr, func(kind storage.ReprOpKind, k, _ []byte) error {
		if kind != storage.ReprSet {
			return errNotVersionSets
		}
		key, kk, ts, err := mvcc.DecodeKey(k)
		if err != nil || kk != mvcc.KindVersion {
			return errNotVersionSets
		}
		if e, ok := c.m[string(key)]; ok && e.gen == c.gen && ts > e.newest {
			e.newest = ts
			c.m[string(key)] = e
		}
		return nil
	})
	if err != nil {
		// Anything but version Sets (or a repr that does not decode, which
		// applying it has already reported): forget everything.
		c.gen++
		c.m = nil
	}
}

type keyStatesError struct{}

func (keyStatesError) Error() string { return "kvserver: not only version sets" }

var errNotVersionSets error = keyStatesError{}
