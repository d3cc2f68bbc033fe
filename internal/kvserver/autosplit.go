package kvserver

import (
	"bytes"
	"context"
	"errors"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/storage"
)

// Size-based splitting: a user range whose estimated size on disk passes
// Config.RangeSplitBytes is split by its leaseholder at the key that
// halves its data, so that ranges, and with them snapshots, stay bounded
// whatever is written. The balance loop checks the ranges that were active
// since its last round (a quiescent range does not grow) and splits at
// most one range per round.

// DefaultRangeSplitBytes is the default of Config.RangeSplitBytes, of the
// order of CockroachDB's default range size.
const DefaultRangeSplitBytes = 64 << 20

// rangeDiskBytes estimates the bytes rr's user data takes on disk (the
// sstables overlapping its span; the memtable is not counted).
func (n *Node) rangeDiskBytes(rr *rangeReplica) (uint64, bool) {
	d := rr.sm.Desc()
	if d == nil || bytes.Compare(d.StartKey, keys.UserPrefix) < 0 {
		return 0, false
	}
	lo, hi := mvcc.SpanBounds(d.StartKey, d.EndKey)
	size, err := n.eng.DB().EstimateDiskUsage(lo, hi)
	if err != nil {
		return 0, false
	}
	return size, true
}

// maybeSplitBySize splits rr, which this node leads, if it has grown past
// the threshold. It reports whether it proposed a split.
func (n *Node) maybeSplitBySize(ctx context.Context, rr *rangeReplica) bool {
	limit := n.cfg.RangeSplitBytes
	if limit <= 0 {
		return false
	}
	size, ok := n.rangeDiskBytes(rr)
	if !ok || size < uint64(limit) {
		return false
	}
	d := rr.sm.Desc()
	if last, ok := n.splitChecked[d.RangeId]; ok && last.generation == d.Generation && size < last.size+uint64(limit)/4 {
		// Scanned at about this size and found no split worth making.
		return false
	}
	key, live, err := splitKeyBySize(n.eng, d.StartKey, d.EndKey)
	if err != nil || key == nil || live < limit/2 {
		// Nothing to split on (one key), or the size on disk is mostly
		// dead bytes not yet compacted away: look again once it grows.
		n.splitChecked[d.RangeId] = splitCheck{generation: d.Generation, size: size}
		n.log.Debug("size-based split: none", "range", d.RangeId, "bytes_on_disk", size, "live_bytes", live, "err", err)
		return false
	}
	resp := n.splitLocal(ctx, rr, key)
	if resp.Error != nil {
		n.log.Warn("size-based split failed", "range", d.RangeId, "bytes", size, "err", resp.Error.Message)
		return false
	}
	n.log.Info("split a range by size", "range", d.RangeId, "bytes_on_disk", size, "limit", limit,
		"left", resp.Left.GetRangeId(), "right", resp.Right.GetRangeId())
	return true
}

// rangeApproxBytes estimates the bytes rr's data, system or user, takes
// in this node's store (0 if unknown): NodeStatus's approx_bytes.
func (n *Node) rangeApproxBytes(rr *rangeReplica) uint64 {
	d := rr.sm.Desc()
	if d == nil {
		return 0
	}
	lo, hi := mvcc.SpanBounds(d.StartKey, d.EndKey)
	size, err := n.eng.DB().EstimateDiskUsage(lo, hi)
	if err != nil {
		return 0
	}
	return size
}

// splitCheck records a size-based split check that found no split.
type splitCheck struct {
	generation uint64
	size       uint64 // estimated bytes on disk then
}

// errSplitKeyFound ends splitKeyBySize's scan.
var errSplitKeyFound = errors.New("found")

// splitKeyBySize returns the logical key at which [start, end) divides its
// data (keys and values, every version) in two halves, or nil if the span
// holds fewer than two logical keys, and the data's size in bytes. The key
// is the first key of the right half, never start. Two passes over the
// span: sizes, then the key.
func splitKeyBySize(r storage.Reader, start, end []byte) ([]byte, int64, error) {
	var total int64
	var last []byte
	keysSeen := 0
	err := mvcc.IterateSpan(r, start, end, func(pk, v []byte) error {
		total += int64(len(pk) + len(v))
		k, _, _, err := mvcc.DecodeKey(pk)
		if err != nil {
			return err
		}
		if !bytes.Equal(k, last) {
			keysSeen++
			last = append(last[:0], k...)
		}
		return nil
	})
	if err != nil || keysSeen < 2 {
		return nil, total, err
	}
	var acc int64
	var split []byte
	last = last[:0]
	err = mvcc.IterateSpan(r, start, end, func(pk, v []byte) error {
		k, _, _, err := mvcc.DecodeKey(pk)
		if err != nil {
			return err
		}
		if !bytes.Equal(k, last) {
			// A logical key boundary: the right half may start here.
			if acc*2 >= total && !bytes.Equal(k, start) {
				split = append([]byte(nil), k...)
				return errSplitKeyFound
			}
			last = append(last[:0], k...)
		}
		acc += int64(len(pk) + len(v))
		return nil
	})
	if errors.Is(err, errSplitKeyFound) {
		return split, total, nil
	}
	if err != nil {
		return nil, total, err
	}
	// Half the data is in the last key: split before it.
	if !bytes.Equal(last, start) && len(last) > 0 {
		return append([]byte(nil), last...), total, nil
	}
	return nil, total, nil
}
