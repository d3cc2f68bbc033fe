package mvcc

import (
	"bytes"
	"fmt"

	"github.com/canopy-db/canopy/internal/storage"
)

// Refresh is the serializable commit check of the transaction txnStart
// over the logical span [start, end) (RefreshRequest); an empty end means
// the single key start. It returns *ReadConflictError for the first key,
// in key order, that has
//   - a committed version with fromTs < ts <= toTs (Ts set), or
//   - an intent of a transaction other than txnStart, whatever its
//     start_ts (Intent set), as the proto asks: the refresh cannot tell
//     whether that transaction will commit at or below toTs, so it fails
//     and the transaction retries.
//
// If toTs <= fromTs the interval is empty and only intents are checked.
// Refresh only reads; it never writes.
func Refresh(r storage.Reader, start, end []byte, fromTs, toTs, txnStart Timestamp) (err error) {
	var it *storage.Iter
	if len(end) == 0 {
		it, err = r.NewIter(keyPrefix(start), keyEnd(start))
		if err != nil {
			return fmt.Errorf("mvcc: refresh %q: %w", start, err)
		}
	} else if it, err = spanIter(r, "refresh", start, end); err != nil {
		return err
	}
	defer closeIter(it, &err)
	for valid := it.First(); valid; valid = it.Valid() {
		k, kind, ts, err := DecodeKey(it.Key())
		if err != nil {
			return err
		}
		prefix := keyPrefix(k)
		switch kind {
		case KindPlain:
			it.Next()
			continue
		case KindIntent:
			raw, err := it.Value()
			if err != nil {
				return fmt.Errorf("mvcc: refresh: read intent %q: %w", k, err)
			}
			iv, err := DecodeIntentValue(raw)
			if err != nil {
				return fmt.Errorf("mvcc: intent at %q: %w", k, err)
			}
			if iv.Txn.StartTs != txnStart {
				return &ReadConflictError{Key: k, Intent: &Intent{Key: clone(k), Txn: cloneTxn(iv.Txn)}}
			}
			if !it.Next() || !bytes.HasPrefix(it.Key(), prefix) {
				continue
			}
			if _, kind, ts, err = DecodeKey(it.Key()); err != nil {
				return err
			}
			if kind != KindVersion {
				return fmt.Errorf("mvcc: refresh %q: %s key after the intent slot: %w", k, kind, storage.ErrCorruption)
			}
		}
		// The iterator is on k's newest version, at ts.
		if toTs > fromTs {
			if ts > toTs {
				if !it.SeekGE(VersionKey(k, toTs)) || !bytes.HasPrefix(it.Key(), prefix) {
					continue
				}
				if _, _, ts, err = DecodeKey(it.Key()); err != nil {
					return err
				}
			}
			if ts > fromTs && ts <= toTs {
				return &ReadConflictError{Key: k, Ts: ts}
			}
		}
		if len(end) == 0 {
			// The single key is checked: stepping past its older
			// versions would only reach the iterator's bound.
			return nil
		}
		seekPastKey(it, prefix)
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("mvcc: refresh [%q, %q): %w", start, end, err)
	}
	return nil
}
