package changefeed

import (
	"bytes"
	"fmt"

	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/storage"
)

// CatchUp calls emit with every committed version in [start, end) above
// fromTs that r holds, key by key in key order and, within a key, in
// commit-timestamp order (the order a live rangefeed emits them). Values of
// versions at or below fromTs are not read. An error from emit stops the
// scan and is returned as is.
//
// The caller checks fromTs against the GC threshold first: below it,
// versions the scan would need may be gone (kvserver answers COMPACTED).
func CatchUp(r storage.Reader, start, end []byte, fromTs uint64, emit func(Event) error) (err error) {
	lo, hi := mvcc.SpanBounds(start, end)
	it, err := r.NewIter(lo, hi)
	if err != nil {
		return fmt.Errorf("changefeed: catch-up scan: %w", err)
	}
	defer func() {
		if cerr := it.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	var cur []byte
	var versions []Event // of cur, newest first
	flush := func() error {
		for i := len(versions) - 1; i >= 0; i-- {
			if err := emit(versions[i]); err != nil {
				return err
			}
		}
		versions = versions[:0]
		return nil
	}
	for valid := it.First(); valid; valid = it.Next() {
		k, kind, ts, err := mvcc.DecodeKey(it.Key())
		if err != nil {
			return err
		}
		if !bytes.Equal(k, cur) {
			if err := flush(); err != nil {
				return err
			}
			cur = k
		}
		if kind != mvcc.KindVersion || ts <= fromTs {
			continue
		}
		raw, err := it.Value()
		if err != nil {
			return fmt.Errorf("changefeed: catch-up scan: read %x: %w", it.Key(), err)
		}
		v, del, err := mvcc.DecodeVersionValue(raw)
		if err != nil {
			return err
		}
		versions = append(versions, Event{Key: k, Value: bytes.Clone(v), Deleted: del, Ts: ts})
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("changefeed: catch-up scan: %w", err)
	}
	return flush()
}

// ScanIntents returns the intents in [start, end) that r holds, for
// Processor.Init.
func ScanIntents(r storage.Reader, start, end []byte) (out []Intent, err error) {
	lo, hi := mvcc.SpanBounds(start, end)
	it, err := r.NewIter(lo, hi)
	if err != nil {
		return nil, fmt.Errorf("changefeed: intent scan: %w", err)
	}
	defer func() {
		if cerr := it.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	for valid := it.First(); valid; valid = it.Next() {
		k, kind, _, err := mvcc.DecodeKey(it.Key())
		if err != nil {
			return nil, err
		}
		if kind != mvcc.KindIntent {
			continue
		}
		raw, err := it.Value()
		if err != nil {
			return nil, fmt.Errorf("changefeed: intent scan: read %x: %w", it.Key(), err)
		}
		iv, err := mvcc.DecodeIntentValue(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, Intent{Key: k, StartTs: iv.Txn.StartTs, HeartbeatKey: bytes.Clone(iv.Txn.HeartbeatKey)})
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("changefeed: intent scan: %w", err)
	}
	return out, nil
}
