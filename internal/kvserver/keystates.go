package kvserver

import (
	"errors"
	"sync"
	"sync/atomic"

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
//     non-transactional Puts and one-phase commits write), evaluated in the
//     cache's term, raises the newest version of each cached key it writes;
//   - anything else (an intent written or resolved, a version deleted, a
//     command evaluated in another term, a split, a snapshot, a
//     configuration change, a command of any other form, or any command
//     while the cache is empty) starts a new generation, which forgets
//     every entry at once, and starts another once the command's batch
//     has committed (Flushed), since a Put may read the engine in between.
//
// An entry is used only in the generation it was noted in, and only by a
// Put evaluated in the term of the commands applied last (at): a replica
// that lost its lease may still evaluate a Put that passed the lease
// check, while commands another leaseholder evaluated, which never took
// this replica's latches, apply here. A Put notes what it found and
// wrote under its key's write latch, in the generation it took before
// reading: a command of this term that writes the key cannot apply in
// between, unless its
// latch was given up early, which happens only once this replica has
// stepped down with no leader known. Then no command of its term can be
// proposed any more (a Put noted then fails to propose), and the first
// command of a later term forgets; an intent of the early-released
// command forgets when it applies, and its version Sets raise entries as
// any do.
type keyStates struct {
	mu   sync.Mutex
	gen  uint64 // from 1 once the first command applied; 0 never matches
	term uint64 // the evaluation term of the commands applied last
	// dirty: a generation started while the current batch of applied
	// commands has not committed yet; Flushed starts another.
	dirty bool
	m     map[string]keyStateEntry
}

// keyStatesMax bounds the entries of one replica's cache; when it is
// full, the cache starts over.
const keyStatesMax = 1 << 16

// keyStatesProcessMax bounds the entries of all the caches of a process
// (one node, for canopy start): about 20 MiB of small keys. Past it, Puts
// note no new key until entries are forgotten; a node of many ranges that
// all take Puts thus caches the keys of some. Entries are counted in
// keyStatesEntries; a replica removed, or a node stopped, forgets its own.
const keyStatesProcessMax = 1 << 18

var keyStatesEntries atomic.Int64

type keyStateEntry struct {
	gen    uint64
	newest mvcc.Timestamp
}

// at returns the cache as seen by a Put evaluated in term.
func (c *keyStates) at(term uint64) eval.KeyStates { return termKeyStates{c, term} }

// termKeyStates implements eval.KeyStates for Puts evaluated in term.
type termKeyStates struct {
	c    *keyStates
	term uint64
}

// Known implements eval.KeyStates. gen is 0 (which no entry has) if the
// cache is not in this term.
func (t termKeyStates) Known(key []byte) (newest mvcc.Timestamp, gen uint64, ok bool) {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term != t.term {
		return 0, 0, false
	}
	e, ok := c.m[string(key)]
	if !ok || c.gen == 0 || e.gen != c.gen {
		return 0, c.gen, false
	}
	return e.newest, c.gen, true
}

// Note implements eval.KeyStates.
func (t termKeyStates) Note(key []byte, newest mvcc.Timestamp, gen uint64) {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen == 0 || gen != c.gen || c.term != t.term {
		return // a command applied since: what was read may be stale
	}
	e, ok := c.m[string(key)]
	if ok && e.gen == gen && e.newest > newest {
		newest = e.newest
	}
	if !ok {
		if len(c.m) >= keyStatesMax {
			c.dropLocked()
		}
		if keyStatesEntries.Load() >= keyStatesProcessMax {
			return
		}
		if c.m == nil {
			c.m = map[string]keyStateEntry{}
		}
		keyStatesEntries.Add(1)
	}
	c.m[string(key)] = keyStateEntry{gen: gen, newest: newest}
}

// forget starts a new generation now and another once the current batch
// of applied commands has committed: no entry is used again.
func (c *keyStates) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked()
}

func (c *keyStates) forgetLocked() {
	c.gen++
	c.dirty = true
	c.dropLocked()
}

// dropLocked removes every entry, giving them back to the process's count.
func (c *keyStates) dropLocked() {
	keyStatesEntries.Add(-int64(len(c.m)))
	c.m = nil
}

// flushed is told that the applied commands' batch has committed.
func (c *keyStates) flushed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dirty {
		c.gen++
		c.dirty = false
		c.dropLocked() // what was noted since the forget is of no use
	}
}

// applied tells the cache about the writes of an applied command that
// was evaluated in term, repr as the command carries them
// (storage.Batch.Repr).
func (c *keyStates) applied(eng *storage.Engine, term uint64, repr []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if term != c.term || len(c.m) == 0 {
		// Another term's command, or nothing to keep (a follower's cache):
		// forget without decoding.
		c.term = term
		c.forgetLocked()
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
		c.forgetLocked()
	}
}

var errNotVersionSets = errors.New("kvserver: not only version sets")
