package mvcc

import (
	"bytes"
	"fmt"

	"github.com/canopy-db/canopy/internal/storage"
)

// GC removes the committed versions of the logical keys in [start, end)
// that no read at or above thresholdTs can see; an empty end means the end
// of the keyspace. It returns how many versions it deleted. See GCLimited.
func GC(rw storage.ReadWriter, start, end []byte, thresholdTs Timestamp) (versionsDeleted int, err error) {
	versionsDeleted, _, err = GCLimited(rw, start, end, thresholdTs, 0)
	return versionsDeleted, err
}

// GCLimited is GC that stops after deleting versionsMax versions (0: no
// limit) and then returns the logical key to resume from.
//
// For each key it keeps every version newer than thresholdTs and the
// newest version at or below thresholdTs, which reads at or above the
// threshold may still see, unless that version is a tombstone, and
// deletes every older version. It never touches intents or plain keys.
// After GC, reads below thresholdTs may return wrong results: the caller
// (the replica) must refuse them.
//
// Versions are deleted one by one: the ones to drop are interleaved with
// ones to keep, so a range deletion does not fit. The engine counts the
// value-log bytes of each deleted version as garbage when the batch is
// written.
//
// Invariant kept at every stopping point, so that a resumed GC and
// concurrent readers at or above the threshold see the same data: a
// tombstone that is the newest version at or below the threshold is
// deleted after all the versions below it. Were it deleted first and GC
// stopped, the resumed pass would take the next older value for the
// newest version and keep it, resurrecting a deleted value.
func GCLimited(rw storage.ReadWriter, start, end []byte, thresholdTs Timestamp, versionsMax int) (versionsDeleted int, resumeKey []byte, err error) {
	return GCLimitedPlain(rw, start, end, thresholdTs, versionsMax, nil)
}

// PlainGC is the GC of a plain slot's value for GCLimitedPlain: it returns
// the value to store (nil: delete the slot) and whether it changed. It must
// be deterministic (GC runs on every replica) and idempotent (a resumed GC
// visits the slot again).
type PlainGC func(key, value []byte) (out []byte, changed bool)

// GCLimitedPlain is GCLimited that also passes the plain slot of each
// logical key in the span to plain (if not nil) and writes back what it
// returns; each changed slot counts as one deletion towards versionsMax and
// in versionsDeleted. Version GC of user ranges uses it for the key records
// (eval.GCKeyRecord), which live in the plain slots of user keys.
func GCLimitedPlain(rw storage.ReadWriter, start, end []byte, thresholdTs Timestamp, versionsMax int, plain PlainGC) (versionsDeleted int, resumeKey []byte, err error) {
	if thresholdTs == 0 {
		return 0, nil, nil
	}
	if versionsMax < 0 {
		return 0, nil, invalidf("gc: versions max %d < 0", versionsMax)
	}
	it, err := spanIter(rw, "gc", start, end)
	if err != nil {
		return 0, nil, err
	}
	defer closeIter(it, &err)
	full := func() bool { return versionsMax > 0 && versionsDeleted >= versionsMax }
	for valid := it.First(); valid; valid = it.Valid() {
		k, kind, ts, err := DecodeKey(it.Key())
		if err != nil {
			return versionsDeleted, nil, err
		}
		if kind == KindPlain && plain != nil {
			if full() {
				return versionsDeleted, k, nil
			}
			raw, err := it.Value()
			if err != nil {
				return versionsDeleted, nil, fmt.Errorf("mvcc: gc: read plain %q: %w", k, err)
			}
			out, changed := plain(k, raw)
			if changed {
				if out == nil {
					err = rw.Delete(it.Key())
				} else {
					err = rw.Set(it.Key(), out)
				}
				if err != nil {
					return versionsDeleted, nil, fmt.Errorf("mvcc: gc: write plain %q: %w", k, err)
				}
				versionsDeleted++
			}
		}
		if kind != KindVersion {
			it.Next()
			continue
		}
		if ts > thresholdTs {
			// Skip the versions nobody may drop.
			it.SeekGE(VersionKey(k, thresholdTs))
			continue
		}
		// The newest version at or below the threshold.
		keep := clone(it.Key())
		raw, err := it.Value()
		if err != nil {
			return versionsDeleted, nil, fmt.Errorf("mvcc: gc: read %q at %d: %w", k, ts, err)
		}
		_, isDelete, err := DecodeVersionValue(raw)
		if err != nil {
			return versionsDeleted, nil, fmt.Errorf("mvcc: gc: version of %q at %d: %w", k, ts, err)
		}
		prefix := keyPrefix(k)
		for it.Next() && bytes.HasPrefix(it.Key(), prefix) {
			if full() {
				return versionsDeleted, k, nil
			}
			if err := rw.Delete(it.Key()); err != nil {
				return versionsDeleted, nil, fmt.Errorf("mvcc: gc: delete %x: %w", it.Key(), err)
			}
			versionsDeleted++
		}
		if isDelete {
			if full() {
				return versionsDeleted, k, nil
			}
			if err := rw.Delete(keep); err != nil {
				return versionsDeleted, nil, fmt.Errorf("mvcc: gc: delete %x: %w", keep, err)
			}
			versionsDeleted++
		}
	}
	if err := it.Error(); err != nil {
		return versionsDeleted, nil, fmt.Errorf("mvcc: gc [%q, %q): %w", start, end, err)
	}
	return versionsDeleted, nil, nil
}
