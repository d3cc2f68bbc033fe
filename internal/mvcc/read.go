package mvcc

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"github.com/canopy-db/canopy/internal/storage"
)

// KV is one key-value pair returned by a scan. Ts is the commit timestamp
// of the version read; for a transaction's own intent it is the
// transaction's start_ts (the intent has no commit timestamp yet); for a
// plain key it is 0.
type KV struct {
	Key   []byte
	Value []byte
	Ts    Timestamp
}

// ScanIntentsMax bounds the intents one Scan collects into its
// IntentError. The scan stops once it has that many: the caller resolves
// them and scans again, so reporting more would only make the error larger.
const ScanIntentsMax = 1000

// Get reads logical key at ts (GetRequest).
//
//   - ts == 0 reads the latest committed version.
//   - txnStart != 0 names the reading transaction: its own intent at key
//     is read as the value (read-your-writes), with versionTs = txnStart;
//     an own tombstone reads as not found.
//   - An intent of another transaction with start_ts <= ts, or any when
//     ts == 0, gives *IntentError. One with start_ts > ts is skipped: its
//     transaction will commit above start_ts, so above ts.
//   - Otherwise the newest committed version at or below ts is read. A
//     tombstone reads as found == false with versionTs set to its
//     timestamp; no version at all gives found == false, versionTs == 0.
//
// The value is a copy owned by the caller. Errors wrapping
// storage.ErrCorruption report undecodable stored data.
func Get(r storage.Reader, key []byte, ts, txnStart Timestamp) (value []byte, versionTs Timestamp, found bool, err error) {
	prefix := keyPrefix(key)
	it, err := r.NewIter(append(prefix, slotIntent), keyEnd(key))
	if err != nil {
		return nil, 0, false, fmt.Errorf("mvcc: get %q: %w", key, err)
	}
	defer closeIter(it, &err)
	if !it.First() {
		return nil, 0, false, iterErr(it, "get", key)
	}
	res, err := readAt(it, key, prefix, ts, txnStart)
	if err != nil {
		return nil, 0, false, err
	}
	if res.intent != nil {
		return nil, 0, false, &IntentError{Intents: []Intent{*res.intent}}
	}
	return res.value, res.ts, res.found, nil
}

// GetIntent returns the intent stored at key, if any, whoever wrote it.
// It lets a transaction prove that a pipelined write was applied. The
// returned slices are owned by the caller.
func GetIntent(r storage.Reader, key []byte) (v IntentValue, found bool, err error) {
	raw, err := r.Get(IntentKey(key))
	if errors.Is(err, storage.ErrNotFound) {
		return IntentValue{}, false, nil
	}
	if err != nil {
		return IntentValue{}, false, fmt.Errorf("mvcc: get intent %q: %w", key, err)
	}
	v, err = DecodeIntentValue(raw)
	if err != nil {
		return IntentValue{}, false, fmt.Errorf("mvcc: intent at %q: %w", key, err)
	}
	return v, true, nil
}

// Scan reads the logical keys in [start, end) at ts, in key order, under
// the rules of Get (ScanRequest). An empty end means the end of the
// keyspace; start > end is ErrInvalidArgument.
//
// The scan stops after limit pairs (0: no limit) or once the pairs read
// hold at least maxBytes bytes of key and value (0: no limit; the pair
// that crosses the limit is returned, so a scan always makes progress).
// If it stopped early and keys remain in the span, resumeKey is the
// logical key to continue from; otherwise it is nil.
//
// All intents of other transactions that the scan meets (up to
// ScanIntentsMax) are returned together in one *IntentError, and then no
// pairs are returned. Plain keys in the span are skipped: they are read
// with ScanPlain.
func Scan(r storage.Reader, start, end []byte, ts, txnStart Timestamp, limit, maxBytes int) (kvs []KV, resumeKey []byte, err error) {
	if len(end) != 0 && bytes.Compare(start, end) > 0 {
		return nil, nil, invalidf("scan start %q > end %q", start, end)
	}
	if limit < 0 || maxBytes < 0 {
		return nil, nil, invalidf("scan limit %d, max bytes %d: negative", limit, maxBytes)
	}
	lo, hi := SpanBounds(start, end)
	it, err := r.NewIter(lo, hi)
	if err != nil {
		return nil, nil, fmt.Errorf("mvcc: scan [%q, %q): %w", start, end, err)
	}
	defer closeIter(it, &err)
	var intents []Intent
	bytesRead := 0
	for valid := it.First(); valid; valid = it.Valid() {
		k, kind, _, err := DecodeKey(it.Key())
		if err != nil {
			return nil, nil, err
		}
		prefix := keyPrefix(k)
		if kind == KindPlain {
			if !it.Next() || !bytes.HasPrefix(it.Key(), prefix) {
				continue
			}
		}
		if (limit > 0 && len(kvs) >= limit) || (maxBytes > 0 && bytesRead >= maxBytes) {
			resumeKey = k
			break
		}
		res, err := readAt(it, k, prefix, ts, txnStart)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case res.intent != nil:
			intents = append(intents, *res.intent)
			if len(intents) >= ScanIntentsMax {
				return nil, nil, &IntentError{Intents: intents}
			}
		case res.found:
			// Pairs still count toward the limits after an intent was
			// met, so that the intents reported are those within the
			// part of the span this scan would have returned.
			kvs = append(kvs, KV{Key: k, Value: res.value, Ts: res.ts})
			bytesRead += len(k) + len(res.value)
		}
		seekPastKey(it, prefix)
	}
	if err := it.Error(); err != nil {
		return nil, nil, fmt.Errorf("mvcc: scan [%q, %q): %w", start, end, err)
	}
	if len(intents) > 0 {
		return nil, nil, &IntentError{Intents: intents}
	}
	return kvs, resumeKey, nil
}

// readResult is the outcome of readAt: either an intent in the way, or a
// value (found) or nothing.
type readResult struct {
	value  []byte
	ts     Timestamp
	found  bool
	intent *Intent
}

// readAt evaluates a read of logical key k (whose physical prefix is
// prefix) at ts for txnStart, under the rules documented on Get. The
// iterator must be positioned at k's intent or at one of its versions;
// where it is left is unspecified.
func readAt(it *storage.Iter, k, prefix []byte, ts, txnStart Timestamp) (readResult, error) {
	readTs := ts
	if ts == 0 {
		readTs = math.MaxUint64
	}
	if isIntentOf(it.Key(), prefix) {
		raw, err := it.Value()
		if err != nil {
			return readResult{}, fmt.Errorf("mvcc: read intent %q: %w", k, err)
		}
		iv, err := DecodeIntentValue(raw)
		if err != nil {
			return readResult{}, fmt.Errorf("mvcc: intent at %q: %w", k, err)
		}
		if txnStart != 0 && iv.Txn.StartTs == txnStart {
			if iv.IsDelete {
				return readResult{}, nil
			}
			return readResult{value: clone(iv.Value), ts: txnStart, found: true}, nil
		}
		if iv.Txn.StartTs <= readTs {
			return readResult{intent: &Intent{Key: clone(k), Txn: cloneTxn(iv.Txn)}}, nil
		}
		// A foreign intent from a transaction that started after ts: it
		// can only commit above ts, so it is invisible at ts.
		if !it.Next() {
			return readResult{}, iterErr(it, "read", k)
		}
	}
	// Position at the newest version at or below readTs. The iterator is
	// on k's newest version, if k has one; seek only if that is too new.
	if !bytes.HasPrefix(it.Key(), prefix) {
		return readResult{}, nil
	}
	_, kind, vts, err := DecodeKey(it.Key())
	if err != nil {
		return readResult{}, err
	}
	if kind != KindVersion {
		return readResult{}, fmt.Errorf("mvcc: read %q: %s key after the intent slot: %w", k, kind, storage.ErrCorruption)
	}
	if vts > readTs {
		if !it.SeekGE(VersionKey(k, readTs)) || !bytes.HasPrefix(it.Key(), prefix) {
			return readResult{}, iterErr(it, "read", k)
		}
		if _, kind, vts, err = DecodeKey(it.Key()); err != nil {
			return readResult{}, err
		}
		if kind != KindVersion || vts > readTs {
			return readResult{}, fmt.Errorf("mvcc: read %q: seek to version at %d landed on %s at %d: %w", k, readTs, kind, vts, storage.ErrCorruption)
		}
	}
	raw, err := it.Value()
	if err != nil {
		return readResult{}, fmt.Errorf("mvcc: read %q at %d: %w", k, vts, err)
	}
	v, isDelete, err := DecodeVersionValue(raw)
	if err != nil {
		return readResult{}, fmt.Errorf("mvcc: version of %q at %d: %w", k, vts, err)
	}
	if isDelete {
		return readResult{ts: vts}, nil
	}
	return readResult{value: clone(v), ts: vts, found: true}, nil
}

// isIntentOf reports whether physical is the intent key of the logical key
// whose physical prefix is prefix.
func isIntentOf(physical, prefix []byte) bool {
	return len(physical) == len(prefix)+1 && physical[len(prefix)] == slotIntent && bytes.HasPrefix(physical, prefix)
}

// nextStepsMax is how many Next calls seekPastKey tries before it seeks:
// most keys have few versions, and Next is cheaper than SeekGE.
const nextStepsMax = 4

// seekPastKey moves the iterator, from wherever it is at or after the
// first physical key of the logical key with physical prefix prefix, to
// the first physical key after those of that logical key.
func seekPastKey(it *storage.Iter, prefix []byte) {
	for i := 0; it.Valid() && bytes.HasPrefix(it.Key(), prefix); i++ {
		if i == nextStepsMax {
			end := make([]byte, len(prefix), len(prefix)+1)
			copy(end, prefix)
			it.SeekGE(append(end, slotEnd))
			return
		}
		it.Next()
	}
}

func closeIter(it *storage.Iter, err *error) {
	if cerr := it.Close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("mvcc: close iterator: %w", cerr)
	}
}

// iterErr wraps the iterator's error, if any, after a positioning call
// returned false.
func iterErr(it *storage.Iter, op string, key []byte) error {
	if err := it.Error(); err != nil {
		return fmt.Errorf("mvcc: %s %q: %w", op, key, err)
	}
	return nil
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func cloneTxn(t TxnMeta) TxnMeta {
	return TxnMeta{StartTs: t.StartTs, HeartbeatKey: clone(t.HeartbeatKey)}
}
