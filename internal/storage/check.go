package storage

import (
	"fmt"

	"github.com/canopy-db/canopy/internal/vlog"
	"github.com/cockroachdb/pebble/v2"
)

// CheckBlobs verifies the value log against the LSM: every pointer names a
// known file and a record that reads back verified under its key, and for
// every file the record bytes minus the bytes of records still pointed to
// equal the discard count, both in memory and as persisted. It reads the
// whole data span and every separated value: for tests and benchmarks, on a
// quiescent engine (no concurrent writes or GC).
func (e *Engine) CheckBlobs() error {
	e.gc.mu.Lock()
	defer e.gc.mu.Unlock()
	live := map[uint64]int64{}
	type liveRec struct {
		file       uint64
		start, end int64
	}
	var liveRecs []liveRec
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: []byte{PrefixData}, UpperBound: DataSpanEnd()})
	if err != nil {
		return err
	}
	var buf []byte
	for it.First(); it.Valid(); it.Next() {
		stored, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return err
		}
		p, isPtr, err := decodeStoredPointer(stored)
		if err != nil {
			it.Close()
			return fmt.Errorf("key %q: %w", it.Key(), err)
		}
		if !isPtr {
			continue
		}
		if buf, err = e.blobs.read(p, it.Key(), buf[:0]); err != nil {
			it.Close()
			return fmt.Errorf("key %q: %w", it.Key(), err)
		}
		n := vlog.RecordBytes(len(it.Key()), int(p.ValueBytes))
		live[p.File] += n
		liveRecs = append(liveRecs, liveRec{p.File, p.Offset, p.Offset + n})
	}
	if err := it.Close(); err != nil {
		return err
	}
	s := e.blobs
	s.mu.Lock()
	defer s.mu.Unlock()
	for num := range live {
		if s.mu.files[num] == nil {
			return fmt.Errorf("%w: pointers into unknown blob file %d", ErrCorruption, num)
		}
	}
	// No block of a live record was ever punched (in this process).
	for _, r := range liveRecs {
		bf := s.mu.files[r.file]
		for blk := r.start / vlog.BlockBytes; blk*vlog.BlockBytes < r.end; blk++ {
			if bf.punched.has(blk) {
				return fmt.Errorf("blob file %s: block %d of live record [%d,%d) was punched",
					vlog.FileName(r.file), blk, r.start, r.end)
			}
		}
	}
	for num, bf := range s.mu.files {
		if got, want := bf.discard, bf.meta.RecordBytes-live[num]; got != want {
			return fmt.Errorf("blob file %s (%s): discard %d, want %d (records %d, live %d)",
				vlog.FileName(num), bf.meta.State, got, want, bf.meta.RecordBytes, live[num])
		}
		persisted, err := e.persistedDiscard(num)
		if err != nil {
			return err
		}
		if persisted != bf.discard {
			return fmt.Errorf("blob file %s: persisted discard %d, in memory %d", vlog.FileName(num), persisted, bf.discard)
		}
	}
	return nil
}
