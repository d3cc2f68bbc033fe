package mvcc

import (
	"bytes"
	"fmt"

	"github.com/canopy-db/canopy/internal/storage"
)

// keyState is what a write needs to know about a logical key: its intent,
// if any, and its newest committed version, if any; and, read by the same
// iterator when asked for (withPlain), the value at its plain key (which
// sorts just before its intent: key.go), where the eval layer keeps the
// key's record.
type keyState struct {
	intent   *IntentValue // nil: no intent
	newestTs Timestamp    // 0: no committed version
	plain    []byte       // nil: none, or not read
}

// KeyState is a logical key's state as a write of it needs it, read in
// one pass by LoadKeyState: the value at its plain key (Plain, a copy;
// nil if there is none), and what PutIntentLoaded and ResolveIntentLoaded
// check (its intent, its newest committed version). It is valid only on
// the reader it was read from, until that reader is written.
type KeyState struct{ st keyState }

// Plain returns the value at the key's plain key, nil if none.
func (s KeyState) Plain() []byte { return s.st.plain }

// LoadKeyState reads k's plain value, intent and newest version with one
// iterator: for a writer that needs the plain value (the eval layer's key
// record) as well, where GetPlain and then PutIntent would take two
// iterators.
func LoadKeyState(r storage.Reader, k []byte) (KeyState, error) {
	st, err := readKeyState(r, k, true)
	return KeyState{st}, err
}

// LoadWriteState reads k's intent and newest version with one iterator,
// as PutCommitted does, for a caller that keeps what it learns
// (NoIntentState).
func LoadWriteState(r storage.Reader, k []byte) (KeyState, error) {
	st, err := loadKeyState(r, k)
	return KeyState{st}, err
}

// NoIntentState is the state of a key known to have no intent and newest
// as its newest committed version (0: none), for PutCommittedLoaded. The
// caller vouches for it: the eval layer takes it from a cache that every
// applied command keeps exact (kvserver/keystates.go).
func NoIntentState(newest Timestamp) KeyState { return KeyState{keyState{newestTs: newest}} }

// HasIntent reports whether the key has an intent.
func (s KeyState) HasIntent() bool { return s.st.intent != nil }

// NewestTs is the timestamp of the key's newest committed version, 0 if none.
func (s KeyState) NewestTs() Timestamp { return s.st.newestTs }

// loadKeyState reads k's intent and newest version with one iterator.
// The intent's slices are copies.
func loadKeyState(r storage.Reader, k []byte) (keyState, error) {
	return readKeyState(r, k, false)
}

// readKeyState is loadKeyState, reading the plain value too if withPlain.
func readKeyState(r storage.Reader, k []byte, withPlain bool) (st keyState, err error) {
	prefix := keyPrefix(k) // the plain key; its capacity has room for a slot
	lower := prefix
	if !withPlain {
		lower = append(prefix, slotIntent) // prefix itself is unchanged
	}
	it, err := r.NewIter(lower, keyEnd(k))
	if err != nil {
		return keyState{}, fmt.Errorf("mvcc: read %q: %w", k, err)
	}
	defer closeIter(it, &err)
	if !it.First() {
		return keyState{}, iterErr(it, "read", k)
	}
	if withPlain && bytes.Equal(it.Key(), prefix) {
		raw, err := it.Value()
		if err != nil {
			return keyState{}, fmt.Errorf("mvcc: read plain %q: %w", k, err)
		}
		st.plain = append([]byte{}, raw...)
		if !it.Next() {
			return st, iterErr(it, "read", k)
		}
	}
	if isIntentOf(it.Key(), prefix) {
		raw, err := it.Value()
		if err != nil {
			return keyState{}, fmt.Errorf("mvcc: read intent %q: %w", k, err)
		}
		iv, err := DecodeIntentValue(raw)
		if err != nil {
			return keyState{}, fmt.Errorf("mvcc: intent at %q: %w", k, err)
		}
		iv.Txn = cloneTxn(iv.Txn)
		iv.Value = clone(iv.Value)
		st.intent = &iv
		if !it.Next() {
			return st, iterErr(it, "read", k)
		}
	}
	_, kind, ts, err := DecodeKey(it.Key())
	if err != nil {
		return keyState{}, err
	}
	if kind != KindVersion {
		return keyState{}, fmt.Errorf("mvcc: read %q: %s key after the intent slot: %w", k, kind, storage.ErrCorruption)
	}
	raw, err := it.Value()
	if err != nil {
		return keyState{}, fmt.Errorf("mvcc: read %q at %d: %w", k, ts, err)
	}
	// Decoded only to check it: a write never lands next to bytes that
	// fail to decode.
	if _, _, err = DecodeVersionValue(raw); err != nil {
		return keyState{}, fmt.Errorf("mvcc: version of %q at %d: %w", k, ts, err)
	}
	st.newestTs = ts
	return st, nil
}

// PutIntent writes a provisional value (or, if isDelete, a provisional
// tombstone) of txn at key (PutIntentRequest). txn.StartTs must not be 0
// (ErrInvalidArgument); a tombstone must have no value.
//
// Conflicts give *WriteConflictError and write nothing:
//   - a committed version with ts > txn.StartTs (ExistingTs set);
//   - an intent of another transaction (Intent set).
//
// An intent of txn itself is replaced. (The engine counts the replaced
// value's bytes as garbage when the batch is written: storage accounts every
// Set that shadows a value, so no explicit Delete is needed.)
func PutIntent(rw storage.ReadWriter, key, value []byte, isDelete bool, txn TxnMeta) error {
	if err := checkPutIntent(key, value, isDelete, txn); err != nil {
		return err
	}
	st, err := loadKeyState(rw, key)
	if err != nil {
		return err
	}
	return putIntent(rw, st, key, value, isDelete, txn)
}

// PutIntentLoaded is PutIntent for a caller that has read key's state
// with LoadKeyState on rw (and written nothing at key since).
func PutIntentLoaded(rw storage.ReadWriter, st KeyState, key, value []byte, isDelete bool, txn TxnMeta) error {
	if err := checkPutIntent(key, value, isDelete, txn); err != nil {
		return err
	}
	return putIntent(rw, st.st, key, value, isDelete, txn)
}

// checkPutIntent refuses PutIntent's invalid arguments
// (ErrInvalidArgument).
func checkPutIntent(key, value []byte, isDelete bool, txn TxnMeta) error {
	if txn.StartTs == 0 {
		return invalidf("put intent %q: start_ts 0", key)
	}
	if isDelete && len(value) != 0 {
		return invalidf("put intent %q: delete with a %d-byte value", key, len(value))
	}
	return nil
}

// putIntent is PutIntent once the arguments are checked and key's state
// st is read.
func putIntent(rw storage.ReadWriter, st keyState, key, value []byte, isDelete bool, txn TxnMeta) error {
	if st.intent != nil && st.intent.Txn.StartTs != txn.StartTs {
		return &WriteConflictError{Key: clone(key), Intent: &Intent{Key: clone(key), Txn: st.intent.Txn}}
	}
	if st.newestTs > txn.StartTs {
		return &WriteConflictError{Key: clone(key), ExistingTs: st.newestTs}
	}
	if err := rw.Set(IntentKey(key), EncodeIntentValue(IntentValue{Txn: txn, Value: value, IsDelete: isDelete})); err != nil {
		return fmt.Errorf("mvcc: put intent %q: %w", key, err)
	}
	return nil
}

// PutIntentLocked is PutIntent for a writer that holds the key's
// exclusive lock (2pc-locking's Prepare): a committed version newer than
// txn.StartTs is no conflict, because the locks order writers (every
// earlier writer of key took its commit_ts before releasing its lock,
// hence before this writer's commit_ts is taken). Another transaction's
// intent still is (*WriteConflictError with Intent).
func PutIntentLocked(rw storage.ReadWriter, key, value []byte, isDelete bool, txn TxnMeta) error {
	if txn.StartTs == 0 {
		return invalidf("put intent %q: start_ts 0", key)
	}
	if isDelete && len(value) != 0 {
		return invalidf("put intent %q: delete with a %d-byte value", key, len(value))
	}
	st, err := loadKeyState(rw, key)
	if err != nil {
		return err
	}
	if st.intent != nil && st.intent.Txn.StartTs != txn.StartTs {
		return &WriteConflictError{Key: clone(key), Intent: &Intent{Key: clone(key), Txn: st.intent.Txn}}
	}
	if err := rw.Set(IntentKey(key), EncodeIntentValue(IntentValue{Txn: txn, Value: value, IsDelete: isDelete})); err != nil {
		return fmt.Errorf("mvcc: put intent %q: %w", key, err)
	}
	return nil
}

// ResolveIntent resolves the intent of the transaction txnStart at key
// (ResolveIntentRequest). commitTs == 0 means the transaction aborted: the
// intent is removed. Otherwise the intent becomes a committed version at
// commitTs (a tombstone for a provisional delete) and is removed.
//
// Resolution is idempotent: if key has no intent, or an intent of another
// transaction, nothing is written and resolved is false.
//
// txnStart == 0, or commitTs != 0 below txnStart, is ErrInvalidArgument.
// A committed version at or above commitTs next to the intent is
// ErrInvariant: PutIntent and PutCommitted make it impossible, and writing
// the version would either overwrite history or write below it.
func ResolveIntent(rw storage.ReadWriter, key []byte, txnStart, commitTs Timestamp) (resolved bool, err error) {
	if err := checkResolveIntent(key, txnStart, commitTs); err != nil {
		return false, err
	}
	st, err := loadKeyState(rw, key)
	if err != nil {
		return false, err
	}
	return resolveIntent(rw, st, key, txnStart, commitTs)
}

// ResolveIntentLoaded is ResolveIntent for a caller that has read key's
// state with LoadKeyState on rw (and written nothing at key since).
func ResolveIntentLoaded(rw storage.ReadWriter, st KeyState, key []byte, txnStart, commitTs Timestamp) (resolved bool, err error) {
	if err := checkResolveIntent(key, txnStart, commitTs); err != nil {
		return false, err
	}
	return resolveIntent(rw, st.st, key, txnStart, commitTs)
}

// checkResolveIntent refuses ResolveIntent's invalid arguments
// (ErrInvalidArgument).
func checkResolveIntent(key []byte, txnStart, commitTs Timestamp) error {
	if txnStart == 0 {
		return invalidf("resolve intent %q: start_ts 0", key)
	}
	if commitTs != 0 && commitTs < txnStart {
		return invalidf("resolve intent %q: commit_ts %d < start_ts %d", key, commitTs, txnStart)
	}
	return nil
}

// resolveIntent is ResolveIntent once the arguments are checked and key's
// state st is read.
func resolveIntent(rw storage.ReadWriter, st keyState, key []byte, txnStart, commitTs Timestamp) (resolved bool, err error) {
	if st.intent == nil || st.intent.Txn.StartTs != txnStart {
		return false, nil
	}
	if commitTs != 0 {
		if st.newestTs >= commitTs {
			return false, fmt.Errorf("%w: resolve intent %q of txn %d at commit_ts %d: committed version at %d",
				ErrInvariant, key, txnStart, commitTs, st.newestTs)
		}
		if err := rw.Set(VersionKey(key, commitTs), EncodeVersionValue(st.intent.Value, st.intent.IsDelete)); err != nil {
			return false, fmt.Errorf("mvcc: resolve intent %q: write version: %w", key, err)
		}
	}
	if err := rw.Delete(IntentKey(key)); err != nil {
		return false, fmt.Errorf("mvcc: resolve intent %q: delete intent: %w", key, err)
	}
	return true, nil
}

// PutCommitted writes a committed version at ts outside any transaction
// (PutRequest; the caller picks ts from the oracle). ts must not be 0
// (ErrInvalidArgument); a tombstone must have no value.
//
// Any intent at key gives *IntentError; a committed version at ts' >= ts
// gives *WriteConflictError with ExistingTs = ts'. Either way nothing is
// written.
func PutCommitted(rw storage.ReadWriter, key, value []byte, isDelete bool, ts Timestamp) error {
	if err := checkPutCommitted(key, value, isDelete, ts); err != nil {
		return err
	}
	st, err := loadKeyState(rw, key)
	if err != nil {
		return err
	}
	return putCommitted(rw, st, key, value, isDelete, ts)
}

// PutCommittedLoaded is PutCommitted with the key's state already known:
// read from rw by LoadWriteState (or LoadKeyState), with no write of key
// in between, or vouched for by the caller (NoIntentState).
func PutCommittedLoaded(rw storage.ReadWriter, st KeyState, key, value []byte, isDelete bool, ts Timestamp) error {
	if err := checkPutCommitted(key, value, isDelete, ts); err != nil {
		return err
	}
	return putCommitted(rw, st.st, key, value, isDelete, ts)
}

func checkPutCommitted(key, value []byte, isDelete bool, ts Timestamp) error {
	if ts == 0 {
		return invalidf("put %q: timestamp 0", key)
	}
	if isDelete && len(value) != 0 {
		return invalidf("put %q: delete with a %d-byte value", key, len(value))
	}
	return nil
}

func putCommitted(rw storage.ReadWriter, st keyState, key, value []byte, isDelete bool, ts Timestamp) error {
	if st.intent != nil {
		return &IntentError{Intents: []Intent{{Key: clone(key), Txn: st.intent.Txn}}}
	}
	if st.newestTs >= ts {
		return &WriteConflictError{Key: clone(key), ExistingTs: st.newestTs}
	}
	if err := rw.Set(VersionKey(key, ts), EncodeVersionValue(value, isDelete)); err != nil {
		return fmt.Errorf("mvcc: put %q: %w", key, err)
	}
	return nil
}

// spanIter opens an iterator over the physical keys of the logical span
// [start, end), where an empty end means the end of the keyspace.
func spanIter(r storage.Reader, op string, start, end []byte) (*storage.Iter, error) {
	if len(end) != 0 && bytes.Compare(start, end) > 0 {
		return nil, invalidf("%s: start %q > end %q", op, start, end)
	}
	lo, hi := SpanBounds(start, end)
	it, err := r.NewIter(lo, hi)
	if err != nil {
		return nil, fmt.Errorf("mvcc: %s [%q, %q): %w", op, start, end, err)
	}
	return it, nil
}
