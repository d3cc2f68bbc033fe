package mvcc

import (
	"encoding/binary"
	"fmt"

	"github.com/canopy-db/canopy/internal/storage"
)

// Committed version values: one tag byte, then the value.
const (
	versionTagValue     byte = 0x01 // + value bytes (possibly empty)
	versionTagTombstone byte = 0x02 // nothing follows
)

// EncodeVersionValue returns the stored value of a committed version: a
// tag byte then, for a value, its bytes; a tombstone is the tag alone.
func EncodeVersionValue(value []byte, isDelete bool) []byte {
	if isDelete {
		return []byte{versionTagTombstone}
	}
	out := make([]byte, 1+len(value))
	out[0] = versionTagValue
	copy(out[1:], value)
	return out
}

// DecodeVersionValue is the inverse of EncodeVersionValue. The returned
// value aliases raw. Bad bytes give an error wrapping storage.ErrCorruption.
func DecodeVersionValue(raw []byte) (value []byte, isDelete bool, err error) {
	if len(raw) == 0 {
		return nil, false, corruptValuef("version", raw, "empty")
	}
	switch raw[0] {
	case versionTagValue:
		return raw[1:], false, nil
	case versionTagTombstone:
		if len(raw) != 1 {
			return nil, false, corruptValuef("version", raw, "tombstone with %d trailing bytes", len(raw)-1)
		}
		return nil, true, nil
	default:
		return nil, false, corruptValuef("version", raw, "unknown tag %#x", raw[0])
	}
}

// Intent values, format version 1:
//
//	byte     format version (intentFormatV1)
//	byte     flags (intentFlagTombstone; other bits must be zero)
//	uvarint  txn start_ts (never 0)
//	uvarint  length of the heartbeat key, then its bytes
//	rest     the provisional value (empty for a tombstone)
//
// Varints are minimal; the decoder rejects any other encoding, so every
// accepted value re-encodes to the same bytes. A new field means a new
// format version: the decoder rejects versions it does not know rather
// than guess.
const (
	intentFormatV1      byte = 1
	intentFlagTombstone byte = 1 << 0
	intentFlagsKnown         = intentFlagTombstone
)

// IntentValue is the decoded value of an intent.
type IntentValue struct {
	Txn TxnMeta
	// Value is the provisional value; nil when IsDelete.
	Value    []byte
	IsDelete bool
}

// EncodeIntentValue encodes v in the current intent format. It panics if
// v.Txn.StartTs is 0 (callers validate their input first) or if a
// tombstone carries a value.
func EncodeIntentValue(v IntentValue) []byte {
	if v.Txn.StartTs == 0 {
		panic("mvcc: EncodeIntentValue: start_ts 0")
	}
	if v.IsDelete && len(v.Value) != 0 {
		panic("mvcc: EncodeIntentValue: tombstone with a value")
	}
	out := make([]byte, 0, 2+2*binary.MaxVarintLen64+len(v.Txn.HeartbeatKey)+len(v.Value))
	var flags byte
	if v.IsDelete {
		flags |= intentFlagTombstone
	}
	out = append(out, intentFormatV1, flags)
	out = binary.AppendUvarint(out, v.Txn.StartTs)
	out = binary.AppendUvarint(out, uint64(len(v.Txn.HeartbeatKey)))
	out = append(out, v.Txn.HeartbeatKey...)
	return append(out, v.Value...)
}

// DecodeIntentValue is the inverse of EncodeIntentValue. The returned
// slices alias raw. Bad bytes give an error wrapping storage.ErrCorruption.
func DecodeIntentValue(raw []byte) (IntentValue, error) {
	if len(raw) < 2 {
		return IntentValue{}, corruptValuef("intent", raw, "too short")
	}
	if raw[0] != intentFormatV1 {
		return IntentValue{}, corruptValuef("intent", raw, "unknown format version %d", raw[0])
	}
	flags := raw[1]
	if flags&^intentFlagsKnown != 0 {
		return IntentValue{}, corruptValuef("intent", raw, "unknown flags %#x", flags)
	}
	rest := raw[2:]
	startTs, rest, err := readUvarint(rest)
	if err != nil {
		return IntentValue{}, corruptValuef("intent", raw, "start_ts: %v", err)
	}
	if startTs == 0 {
		return IntentValue{}, corruptValuef("intent", raw, "start_ts 0")
	}
	hbLen, rest, err := readUvarint(rest)
	if err != nil {
		return IntentValue{}, corruptValuef("intent", raw, "heartbeat key length: %v", err)
	}
	if hbLen > uint64(len(rest)) {
		return IntentValue{}, corruptValuef("intent", raw, "heartbeat key length %d > %d remaining bytes", hbLen, len(rest))
	}
	v := IntentValue{Txn: TxnMeta{StartTs: startTs}}
	if hbLen > 0 {
		v.Txn.HeartbeatKey = rest[:hbLen]
	}
	rest = rest[hbLen:]
	if flags&intentFlagTombstone != 0 {
		if len(rest) != 0 {
			return IntentValue{}, corruptValuef("intent", raw, "tombstone with %d value bytes", len(rest))
		}
		v.IsDelete = true
		return v, nil
	}
	v.Value = rest
	return v, nil
}

// readUvarint reads one minimal uvarint.
func readUvarint(b []byte) (uint64, []byte, error) {
	x, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, fmt.Errorf("bad uvarint")
	}
	if n != uvarintBytes(x) {
		return 0, nil, fmt.Errorf("non-minimal uvarint")
	}
	return x, b[n:], nil
}

func uvarintBytes(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func corruptValuef(what string, raw []byte, format string, args ...any) error {
	const shownBytesMax = 64
	shown := raw
	if len(shown) > shownBytesMax {
		shown = shown[:shownBytesMax]
	}
	return fmt.Errorf("mvcc: %s value %x (%d bytes): %s: %w", what, shown, len(raw), fmt.Sprintf(format, args...), storage.ErrCorruption)
}
