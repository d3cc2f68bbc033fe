package kvserver

import (
	"errors"
	"time"

	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/storage"
)

// The scrub (issue 13, item 5): every Config.ScrubInterval the node reads
// every value of every replica it holds, leader or not, so that a damaged
// value is found before a client needs it, and on followers, which serve
// no reads. Reading verifies: a blob record's checksums (internal/vlog),
// Pebble's block checksums. A value that fails is handled as a read that
// fails (damage.go): the replica is marked damaged and replaced from a
// healthy one. The scrub reads from an engine snapshot per range, at most
// ScrubBytesPerSecond, so that it does not compete with the node's work.

// DefaultScrubInterval: see Config.ScrubInterval (as CockroachDB's
// consistency checker, about once a day).
const DefaultScrubInterval = 24 * time.Hour

// ScrubBytesPerSecond bounds the scrub's read rate.
const ScrubBytesPerSecond = 32 << 20

// scrub reads every value of every initialized, undamaged replica.
func (n *Node) scrub() {
	start := time.Now()
	var ranges, values, bytes int
	damaged := 0
	for _, rr := range n.replicaList() {
		select {
		case <-n.stopc:
			return
		default:
		}
		d := rr.sm.Desc()
		if d == nil || rr.damaged.Load() {
			continue
		}
		v, b, err := n.scrubRange(d.StartKey, d.EndKey)
		values, bytes = values+v, bytes+b
		ranges++
		if err != nil {
			if errors.Is(err, storage.ErrCorruption) {
				damaged++
				if !rr.damaged.Load() {
					// Damage that the engine's handler did not see (an
					// sstable block, not a blob record).
					n.markDamaged(rr, nil, err)
				}
				continue
			}
			n.log.Warn("scrub: reading a range failed", "range", d.RangeId, "err", err)
		}
	}
	n.log.Info("scrub done", "ranges", ranges, "values", values, "bytes", bytes, "damaged", damaged, "took", time.Since(start).Round(time.Millisecond))
}

// scrubRange reads every value of the logical span [start, end) from an
// engine snapshot, pacing itself to ScrubBytesPerSecond.
func (n *Node) scrubRange(start, end []byte) (values, bytes int, err error) {
	snap := n.eng.NewSnapshot()
	defer snap.Close()
	lo, hi := mvcc.SpanBounds(start, end)
	it, err := snap.NewIter(lo, hi)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if cerr := it.Close(); err == nil {
			err = cerr
		}
	}()
	began := time.Now()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		if err != nil {
			return values, bytes, err
		}
		values++
		bytes += len(it.Key()) + len(v)
		if ahead := time.Duration(float64(bytes)/ScrubBytesPerSecond*float64(time.Second)) - time.Since(began); ahead > 10*time.Millisecond {
			select {
			case <-n.stopc:
				return values, bytes, nil
			case <-time.After(ahead):
			}
		}
	}
	return values, bytes, it.Error()
}
