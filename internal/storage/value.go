package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"sync"

	"github.com/canopy-db/canopy/internal/vlog"
	"github.com/cockroachdb/pebble/v2"
)

// Every value stored under PrefixData starts with a tag byte:
//
//	tagInline  + the value
//	tagPointer + vlog.Pointer encoding (the value is in a blob file)
//
// Values under other prefixes (Raft log, range-local and node-local state)
// are stored as given and never separated: the Raft log is written once and
// truncated, so separating it would only add a second write and a read
// indirection.
//
// Rejected alternative: a tag only on pointers, recognised by a magic
// prefix. A user value could start with the magic; a tag on every value
// costs one byte and is unambiguous.
const (
	tagInline  byte = 0x00
	tagPointer byte = 0x01
)

func isDataKey(key []byte) bool { return len(key) > 0 && key[0] == PrefixData }

// overlapsData reports whether [start, end) contains a data key.
func overlapsData(start, end []byte) bool {
	return bytes.Compare(start, DataSpanEnd()) < 0 && bytes.Compare(end, []byte{PrefixData}) > 0
}

// decodePointer returns the pointer in a stored data value, if it holds one.
func decodeStoredPointer(stored []byte) (vlog.Pointer, bool, error) {
	if len(stored) == 0 {
		return vlog.Pointer{}, false, fmt.Errorf("%w: untagged data value", ErrCorruption)
	}
	switch stored[0] {
	case tagInline:
		return vlog.Pointer{}, false, nil
	case tagPointer:
		p, err := vlog.DecodePointer(stored[1:])
		if err != nil {
			return vlog.Pointer{}, false, fmt.Errorf("%w: %w", ErrCorruption, err)
		}
		return p, true, nil
	}
	return vlog.Pointer{}, false, fmt.Errorf("%w: unknown value tag %#x", ErrCorruption, stored[0])
}

// decodeStored returns the user value of a stored data value: the inline
// bytes (aliasing stored) or the blob record's value (in buf, grown).
func (e *Engine) decodeStored(key, stored, buf []byte) (value, newBuf []byte, err error) {
	p, isPtr, err := decodeStoredPointer(stored)
	if err != nil {
		return nil, buf, err
	}
	if !isPtr {
		return stored[1:], buf, nil
	}
	v, err := e.blobs.read(p, key, buf[:0])
	if err != nil {
		if errors.Is(err, ErrCorruption) {
			e.reportCorruption(key, err)
		}
		return nil, buf, err
	}
	return v, v[:0], nil
}

// getData reads a data key through get (engine, batch or snapshot).
func (e *Engine) getData(key []byte, get func([]byte) ([]byte, io.Closer, error)) ([]byte, error) {
	stored, closer, err := get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	defer closer.Close()
	p, isPtr, err := decodeStoredPointer(stored)
	if err != nil {
		return nil, err
	}
	if !isPtr {
		return append([]byte(nil), stored[1:]...), nil
	}
	return e.blobs.read(p, key, nil)
}

// --- discard counters: a Pebble merge operator -----------------------------

// merger sums 8-byte little-endian deltas under discardPrefix so that every
// write batch can add the bytes it kills to a blob file's counter without
// reading it (no lock on the counter, exact under concurrency). Other keys
// keep Pebble's default (concatenation), which nothing else uses.
var merger = &pebble.Merger{
	Name: "canopy.merge.v1",
	Merge: func(key, value []byte) (pebble.ValueMerger, error) {
		if bytes.HasPrefix(key, discardPrefix) {
			m := &counterMerger{}
			return m, m.MergeNewer(value)
		}
		return pebble.DefaultMerger.Merge(key, value)
	},
}

type counterMerger struct{ sum int64 }

func (m *counterMerger) MergeNewer(v []byte) error {
	if len(v) != 8 {
		return fmt.Errorf("%w: discard counter operand of %d bytes", ErrCorruption, len(v))
	}
	m.sum += int64(binary.LittleEndian.Uint64(v))
	return nil
}
func (m *counterMerger) MergeOlder(v []byte) error { return m.MergeNewer(v) }
func (m *counterMerger) Finish(bool) ([]byte, io.Closer, error) {
	return encodeCounter(m.sum), nil, nil
}

func encodeCounter(n int64) []byte { return binary.LittleEndian.AppendUint64(nil, uint64(n)) }

func decodeCounter(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: discard counter of %d bytes", ErrCorruption, len(b))
	}
	return int64(binary.LittleEndian.Uint64(b)), nil
}

// --- reader gate -------------------------------------------------------------

// readerGate counts open readers per epoch. GC calls fence after it has
// decided from the LSM which bytes are dead: every reader that could still
// hold a pointer to them entered at or before the fenced epoch (a reader
// entering later reads an LSM that no longer points there), so once
// drained(fenced) those bytes can be punched or deleted.
//
// Rejected alternative: pinning blob files by reference count per pointer
// read. It does not cover snapshots and iterators, which may follow a
// pointer long after they were opened.
type readerGate struct {
	mu    sync.Mutex
	epoch uint64         // guarded by mu
	open  map[uint64]int // epoch -> open readers; guarded by mu
}

func (g *readerGate) init() { g.open = map[uint64]int{}; g.epoch = 1 }

func (g *readerGate) enter() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open[g.epoch]++
	return g.epoch
}

func (g *readerGate) exit(ep uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.open[ep] - 1
	if n < 0 {
		panic(fmt.Sprintf("storage: reader gate: epoch %d exited more often than entered", ep))
	}
	if n == 0 {
		delete(g.open, ep)
	} else {
		g.open[ep] = n
	}
}

// fence starts a new epoch and returns the previous one.
func (g *readerGate) fence() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.epoch++
	return g.epoch - 1
}

// drained reports whether no reader of epoch <= ep is open.
func (g *readerGate) drained(ep uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for e := range g.open {
		if e <= ep {
			return false
		}
	}
	return true
}

// --- key stripes ---------------------------------------------------------------

const stripeCount = 256

var stripeSeed = maphash.MakeSeed()

func stripeOf(key []byte) int { return int(maphash.Bytes(stripeSeed, key) % stripeCount) }

// lockStripes locks the stripes of keys (or all of them) in ascending order
// and returns the unlock function.
func (e *Engine) lockStripes(keys [][]byte, all bool) func() {
	var idx []int
	if all {
		idx = make([]int, stripeCount)
		for i := range idx {
			idx[i] = i
		}
	} else {
		var seen [stripeCount]bool
		for _, k := range keys {
			seen[stripeOf(k)] = true
		}
		for i, s := range seen {
			if s {
				idx = append(idx, i)
			}
		}
	}
	for _, i := range idx {
		e.stripes[i].Lock()
	}
	return func() {
		for j := len(idx) - 1; j >= 0; j-- {
			e.stripes[idx[j]].Unlock()
		}
	}
}
