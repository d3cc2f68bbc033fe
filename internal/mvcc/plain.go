package mvcc

import (
	"errors"
	"fmt"

	"github.com/canopy-db/canopy/internal/storage"
)

// Plain keys are unversioned: one value per logical key, no intents, no
// history. They hold system state (status table, heartbeat records, range
// descriptors, the oracle's bound) and live in the slot of the logical key
// before its intent and versions, so a logical key should be used either
// as a plain key or as an MVCC key, never both. Plain values are stored
// as given, with no tag byte.

// GetPlain reads the plain key (PlainGetRequest). The value is a copy
// owned by the caller; an existing empty value is found with len 0.
func GetPlain(r storage.Reader, key []byte) (value []byte, found bool, err error) {
	v, err := r.Get(PlainKey(key))
	if errors.Is(err, storage.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("mvcc: get plain %q: %w", key, err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}

// PutPlain writes value at the plain key, replacing any value
// (PlainPutRequest).
func PutPlain(w storage.Writer, key, value []byte) error {
	if err := w.Set(PlainKey(key), value); err != nil {
		return fmt.Errorf("mvcc: put plain %q: %w", key, err)
	}
	return nil
}

// DeletePlain removes the plain key (PlainPutRequest with delete). Deleting
// a key that has no value is not an error.
func DeletePlain(w storage.Writer, key []byte) error {
	if err := w.Delete(PlainKey(key)); err != nil {
		return fmt.Errorf("mvcc: delete plain %q: %w", key, err)
	}
	return nil
}

// PutPlainUnlessExists writes value at the plain key only if the key has
// no value (PlainPutUnlessExistsRequest). If it has one, ok is false,
// existing holds it (a copy) and nothing is written. When key is a
// transaction's status-table key, a successful call is that transaction's
// commit (or abort) point, so this must run at Raft apply, where the
// check and the write see the same state on every replica.
func PutPlainUnlessExists(rw storage.ReadWriter, key, value []byte) (ok bool, existing []byte, err error) {
	existing, found, err := GetPlain(rw, key)
	if err != nil {
		return false, nil, err
	}
	if found {
		return false, existing, nil
	}
	if err := PutPlain(rw, key, value); err != nil {
		return false, nil, err
	}
	return true, nil, nil
}

// ScanPlain reads the plain keys in [start, end) in key order, up to limit
// pairs (0: no limit); an empty end means the end of the keyspace. Keys
// with only MVCC data are skipped. If it stopped at the limit and the span
// may hold more, resumeKey is the logical key to continue from. KV.Ts is 0.
func ScanPlain(r storage.Reader, start, end []byte, limit int) (kvs []KV, resumeKey []byte, err error) {
	return ScanPlainBounded(r, start, end, limit, 0)
}

// ScanPlainBounded is ScanPlain that also stops, with resumeKey set, once
// the keys and values read reach bytesMax (0: no byte limit); it always
// returns at least one pair if the span holds one, so that a caller
// resuming from resumeKey makes progress.
func ScanPlainBounded(r storage.Reader, start, end []byte, limit, bytesMax int) (kvs []KV, resumeKey []byte, err error) {
	if limit < 0 || bytesMax < 0 {
		return nil, nil, invalidf("scan plain: limit %d or bytes limit %d < 0", limit, bytesMax)
	}
	size := 0
	it, err := spanIter(r, "scan plain", start, end)
	if err != nil {
		return nil, nil, err
	}
	defer closeIter(it, &err)
	for valid := it.First(); valid; valid = it.Valid() {
		k, kind, _, err := DecodeKey(it.Key())
		if err != nil {
			return nil, nil, err
		}
		if kind == KindPlain {
			if (limit > 0 && len(kvs) >= limit) || (bytesMax > 0 && size >= bytesMax) {
				return kvs, k, nil
			}
			v, err := it.Value()
			if err != nil {
				return nil, nil, fmt.Errorf("mvcc: scan plain %q: %w", k, err)
			}
			size += len(k) + len(v)
			kvs = append(kvs, KV{Key: k, Value: clone(v)})
			if kvs[len(kvs)-1].Value == nil {
				kvs[len(kvs)-1].Value = []byte{}
			}
		}
		// The plain slot comes first: nothing after it in k is plain.
		seekPastKey(it, keyPrefix(k))
	}
	if err := it.Error(); err != nil {
		return nil, nil, fmt.Errorf("mvcc: scan plain [%q, %q): %w", start, end, err)
	}
	return kvs, nil, nil
}
