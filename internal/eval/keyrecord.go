package eval

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/storage"
)

// A key record is what a range remembers about transactions at one user
// key beyond its intent and versions. It lives in the key's plain slot
// (mvcc: the slot before the intent and the versions), which reads, scans,
// refreshes and version GC skip, so it is in the key's range, moves with it
// through splits and snapshots, and is covered by the key's latch. It holds
// two lists (docs/design-notes.md, "One-phase commit" and "Parallel
// commits"):
//
//   - onePC: the (start_ts, commit_ts) of the last OnePCRecordsMax 1PC
//     transactions whose first written key this is, oldest first: how a
//     1PC coordinator whose reply was lost learns that it committed
//     (QueryOnePC), and how a resent CommitOnePC answers without writing
//     again;
//
//   - refused: start timestamps that may never write here again: a
//     RecoverIntent that found a STAGING transaction's write missing, or a
//     QueryOnePC that found a 1PC batch not applied. PutIntent and
//     CommitOnePC check it. An entry goes when the transaction's intent at
//     the key is resolved as aborted, or once it is below the range's GC
//     threshold (a request that old is refused anyway, or harmless: its
//     transaction has long been decided).
//
//   - shared: start timestamps of 2pc-locking transactions holding a
//     replicated shared lock here (written by Prepare for a key read and
//     not written; docs/design-notes.md, "The 2PC + locking baseline"):
//     another transaction's Prepare may not write the key until each is
//     resolved (ResolveIntent drops the entry). At most SharedMax.
//
// Encoding: format byte 1 or 2; uvarint n, then n pairs (uvarint start_ts,
// uvarint commit_ts - start_ts); uvarint m, then m uvarint start_ts;
// format 2 only: uvarint s, then s uvarint start_ts (shared). Format 1 is
// written when shared is empty, so stores written before shared locks
// existed read the same. An empty record is deleted, not stored.
type keyRecord struct {
	onePC   []onePCEntry
	refused []uint64
	shared  []uint64
}

// SharedMax bounds the replicated shared locks of one key; a Prepare that
// would exceed it fails (INTERNAL) rather than grow the record without
// bound.
const SharedMax = 1024

const keyRecordFormatShared = 2

// sharedBy returns a holder of a shared lock here other than start, 0 if
// none.
func (k *keyRecord) sharedBy(start uint64) uint64 {
	for _, s := range k.shared {
		if s != start {
			return s
		}
	}
	return 0
}

// share records start as a holder of a shared lock (idempotent).
func (k *keyRecord) share(start uint64) error {
	if slices.Contains(k.shared, start) {
		return nil
	}
	if len(k.shared) >= SharedMax {
		return fmt.Errorf("%w: %d shared locks at one key (SharedMax)", errKeyRecord, len(k.shared))
	}
	k.shared = append(k.shared, start)
	return nil
}

// unshare drops start's shared lock and reports whether it was there.
func (k *keyRecord) unshare(start uint64) bool {
	i := slices.Index(k.shared, start)
	if i < 0 {
		return false
	}
	k.shared = slices.Delete(k.shared, i, i+1)
	return true
}

type onePCEntry struct{ start, commit uint64 }

// OnePCRecordsMax bounds the 1PC entries a key record keeps. Only a
// coordinator whose reply was lost looks its entry up, right away; more
// entries make it likelier to find its own after other 1PC transactions
// wrote the same key in between.
const OnePCRecordsMax = 4

// RefusedMax bounds the refused list of one key; a recovery that would
// exceed it fails (INTERNAL) rather than grow the record without bound.
const RefusedMax = 1024

const keyRecordFormat = 1

var errKeyRecord = errors.New("eval: key record")

func (k *keyRecord) empty() bool {
	return len(k.onePC) == 0 && len(k.refused) == 0 && len(k.shared) == 0
}

func (k *keyRecord) onePCCommit(start uint64) (uint64, bool) {
	for _, e := range k.onePC {
		if e.start == start {
			return e.commit, true
		}
	}
	return 0, false
}

func (k *keyRecord) recordOnePC(start, commit uint64) {
	k.onePC = append(k.onePC, onePCEntry{start, commit})
	if n := len(k.onePC); n > OnePCRecordsMax {
		k.onePC = append(k.onePC[:0], k.onePC[n-OnePCRecordsMax:]...)
	}
}

func (k *keyRecord) refuses(start uint64) bool { return slices.Contains(k.refused, start) }

func (k *keyRecord) refuse(start uint64) error {
	if k.refuses(start) {
		return nil
	}
	if len(k.refused) >= RefusedMax {
		return fmt.Errorf("%w: %d refused transactions at one key (RefusedMax)", errKeyRecord, len(k.refused))
	}
	k.refused = append(k.refused, start)
	return nil
}

// unrefuse drops start from the refused list and reports whether it was
// there.
func (k *keyRecord) unrefuse(start uint64) bool {
	i := slices.Index(k.refused, start)
	if i < 0 {
		return false
	}
	k.refused = slices.Delete(k.refused, i, i+1)
	return true
}

// pruneBelow drops refusals of transactions that started below gc.
func (k *keyRecord) pruneBelow(gc uint64) {
	k.refused = slices.DeleteFunc(k.refused, func(s uint64) bool { return s < gc })
}

// KeyRecordGC is what version GC removed from key records.
type KeyRecordGC struct {
	// Refusals and OnePC count the entries dropped; Records the records
	// left empty and deleted.
	Refusals, OnePC, Records int
}

// GCKeyRecord is version GC of one key record (docs/design-notes.md, "GC
// of the records parallel commits and 1PC leave"): it drops the refusals
// and the 1PC entries of transactions that started below threshold, and
// returns the record to store (nil: delete it) and whether it changed.
// Shared locks stay (ResolveIntent drops them). A value that does not
// decode as a key record is left alone (changed false).
//
// Why this is safe, with the threshold the range records in the same
// command (every request evaluated afterwards sees it):
//   - a refusal of start s < threshold: PutIntent and CommitOnePC refuse
//     every start below the threshold (TS_BELOW_GC_THRESHOLD), so the write
//     the refusal kept out still cannot land;
//   - a 1PC entry of start s < threshold: QueryOnePC below the threshold
//     answers "unknown" unless the record names s, never "prevented", and a
//     CommitOnePC below the threshold is refused, so the batch's outcome
//     is settled; the client, which asks at once after a lost reply, only
//     loses the "committed" answer if it asks after the GC TTL.
func GCKeyRecord(v []byte, threshold uint64) (out []byte, changed bool, st KeyRecordGC) {
	k, err := decodeKeyRecord(v)
	if err != nil {
		return v, false, st
	}
	n := len(k.refused)
	k.pruneBelow(threshold)
	st.Refusals = n - len(k.refused)
	n = len(k.onePC)
	k.onePC = slices.DeleteFunc(k.onePC, func(e onePCEntry) bool { return e.start < threshold })
	st.OnePC = n - len(k.onePC)
	if st.Refusals == 0 && st.OnePC == 0 {
		return v, false, st
	}
	if k.empty() {
		st.Records = 1
		return nil, true, st
	}
	return k.encode(), true, st
}

func (k *keyRecord) encode() []byte {
	f := byte(keyRecordFormat)
	if len(k.shared) > 0 {
		f = keyRecordFormatShared
	}
	b := []byte{f}
	b = binary.AppendUvarint(b, uint64(len(k.onePC)))
	for _, e := range k.onePC {
		b = binary.AppendUvarint(b, e.start)
		b = binary.AppendUvarint(b, e.commit-e.start)
	}
	b = binary.AppendUvarint(b, uint64(len(k.refused)))
	for _, s := range k.refused {
		b = binary.AppendUvarint(b, s)
	}
	if f == keyRecordFormatShared {
		b = binary.AppendUvarint(b, uint64(len(k.shared)))
		for _, s := range k.shared {
			b = binary.AppendUvarint(b, s)
		}
	}
	return b
}

func decodeKeyRecord(b []byte) (keyRecord, error) {
	var k keyRecord
	bad := func(what string) (keyRecord, error) {
		return keyRecord{}, fmt.Errorf("%w: %s in %x: %w", errKeyRecord, what, b, storage.ErrCorruption)
	}
	if len(b) == 0 || (b[0] != keyRecordFormat && b[0] != keyRecordFormatShared) {
		return bad("unknown format")
	}
	rest := b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return 0, false
		}
		rest = rest[n:]
		return v, true
	}
	n, ok := next()
	if !ok || n > OnePCRecordsMax {
		return bad("1PC entry count")
	}
	for range n {
		s, ok1 := next()
		d, ok2 := next()
		if !ok1 || !ok2 || d == 0 || d > math.MaxUint64-s {
			return bad("1PC entry")
		}
		k.onePC = append(k.onePC, onePCEntry{s, s + d})
	}
	m, ok := next()
	if !ok || m > RefusedMax {
		return bad("refused count")
	}
	for range m {
		s, ok := next()
		if !ok {
			return bad("refused entry")
		}
		k.refused = append(k.refused, s)
	}
	if b[0] == keyRecordFormatShared {
		c, ok := next()
		if !ok || c == 0 || c > SharedMax {
			return bad("shared count")
		}
		for range c {
			s, ok := next()
			if !ok {
				return bad("shared entry")
			}
			k.shared = append(k.shared, s)
		}
	}
	if len(rest) != 0 {
		return bad("trailing bytes")
	}
	return k, nil
}

// loadKeyRecord reads key's record; no record reads as an empty one.
func loadKeyRecord(r storage.Reader, key []byte) (keyRecord, error) {
	v, found, err := mvcc.GetPlain(r, key)
	if err != nil || !found {
		return keyRecord{}, err
	}
	return decodeKeyRecord(v)
}

// loadKeyRecordState reads key's record and the state a write of key
// checks (its intent, its newest version) with one iterator: the record
// sits at the key's plain key, just before its intent (mvcc.LoadKeyState).
// Pass the state to mvcc's ...Loaded writes.
func loadKeyRecordState(r storage.Reader, key []byte) (keyRecord, mvcc.KeyState, error) {
	st, err := mvcc.LoadKeyState(r, key)
	if err != nil || st.Plain() == nil {
		return keyRecord{}, st, err
	}
	rec, err := decodeKeyRecord(st.Plain())
	return rec, st, err
}

// storeKeyRecord writes key's record, deleting it when empty.
func storeKeyRecord(w storage.Writer, key []byte, k keyRecord) error {
	if k.empty() {
		return mvcc.DeletePlain(w, key)
	}
	return mvcc.PutPlain(w, key, k.encode())
}

// newestVersionTs returns the timestamp of key's newest committed version,
// 0 if it has none.
func newestVersionTs(r storage.Reader, key []byte) (uint64, error) {
	it, err := r.NewIter(mvcc.VersionKey(key, math.MaxUint64), append(mvcc.VersionKey(key, 1), 0)) // ts 0 is never stored
	if err != nil {
		return 0, fmt.Errorf("eval: versions of %q: %w", key, err)
	}
	defer it.Close()
	if !it.First() {
		if err := it.Error(); err != nil {
			return 0, fmt.Errorf("eval: versions of %q: %w", key, err)
		}
		return 0, nil
	}
	_, kind, ts, err := mvcc.DecodeKey(it.Key())
	if err != nil {
		return 0, err
	}
	if kind != mvcc.KindVersion {
		return 0, fmt.Errorf("eval: versions of %q: found a %s key: %w", key, kind, storage.ErrCorruption)
	}
	return ts, nil
}
