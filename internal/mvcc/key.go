package mvcc

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/canopy-db/canopy/internal/storage"
)

// Timestamp is a timestamp from the timestamp oracle. 0 means "none".
type Timestamp = uint64

// KeyKind says which slot of a logical key a physical key addresses.
type KeyKind uint8

const (
	// KindPlain is an unversioned key (status table, heartbeats, meta).
	KindPlain KeyKind = iota + 1
	// KindIntent is the one provisional write a key may hold.
	KindIntent
	// KindVersion is a committed version at a timestamp.
	KindVersion
)

func (k KeyKind) String() string {
	switch k {
	case KindPlain:
		return "plain"
	case KindIntent:
		return "intent"
	case KindVersion:
		return "version"
	default:
		return fmt.Sprintf("KeyKind(%d)", uint8(k))
	}
}

// Bytes of the physical key layout. See doc.go for the full picture.
const (
	escapeByte     byte = 0x00 // a 0x00 in a logical key is written 0x00 escapedZero
	escapedZero    byte = 0xff
	terminatorByte byte = 0x01 // 0x00 terminatorByte ends the logical key

	slotIntent  byte = 0x00
	slotVersion byte = 0x01
	// slotEnd is one past every slot: PrefixData+esc(k)+0x00 0x01 slotEnd
	// is greater than every physical key of k and not greater than any
	// physical key of a logical key after k.
	slotEnd byte = 0x02

	versionSuffixBytes = 1 + 8
)

// appendEscaped appends esc(k) + 0x00 0x01: the part of every physical key
// of k before the slot.
func appendEscaped(dst, k []byte) []byte {
	for {
		i := bytes.IndexByte(k, escapeByte)
		if i < 0 {
			dst = append(dst, k...)
			break
		}
		dst = append(dst, k[:i+1]...)
		dst = append(dst, escapedZero)
		k = k[i+1:]
	}
	return append(dst, escapeByte, terminatorByte)
}

// keyPrefix returns PrefixData + esc(k) + 0x00 0x01 with room for a slot.
func keyPrefix(k []byte) []byte {
	dst := make([]byte, 0, 1+len(k)+2+versionSuffixBytes+2)
	dst = append(dst, storage.PrefixData)
	return appendEscaped(dst, k)
}

// EncodeKey returns the physical key of logical key k in the slot given by
// kind (and ts, for KindVersion). It panics on an unknown kind or on a
// version at ts 0: both are programming errors, never input.
func EncodeKey(k []byte, kind KeyKind, ts Timestamp) []byte {
	p := keyPrefix(k)
	switch kind {
	case KindPlain:
		return p
	case KindIntent:
		return append(p, slotIntent)
	case KindVersion:
		if ts == 0 {
			panic("mvcc: EncodeKey: version at timestamp 0")
		}
		p = append(p, slotVersion)
		return binary.BigEndian.AppendUint64(p, ^ts)
	default:
		panic(fmt.Sprintf("mvcc: EncodeKey: unknown kind %d", kind))
	}
}

// PlainKey is EncodeKey(k, KindPlain, 0).
func PlainKey(k []byte) []byte { return EncodeKey(k, KindPlain, 0) }

// IntentKey is EncodeKey(k, KindIntent, 0).
func IntentKey(k []byte) []byte { return EncodeKey(k, KindIntent, 0) }

// VersionKey is EncodeKey(k, KindVersion, ts).
func VersionKey(k []byte, ts Timestamp) []byte { return EncodeKey(k, KindVersion, ts) }

// keyEnd is the first physical key after every physical key of k; it is
// also the exclusive upper bound of the versions of k.
func keyEnd(k []byte) []byte { return append(keyPrefix(k), slotEnd) }

// SpanBounds returns the physical bounds [lo, hi) that hold exactly the
// physical keys (plain, intent, versions) of the logical keys in
// [start, end). An empty end means "to the end of the keyspace" and gives
// storage.DataSpanEnd().
func SpanBounds(start, end []byte) (lo, hi []byte) {
	lo = keyPrefix(start)
	if len(end) == 0 {
		return lo, storage.DataSpanEnd()
	}
	return lo, keyPrefix(end)
}

// DecodeKey splits a physical data key into its logical key, kind and (for
// versions) timestamp. The logical key is a fresh slice. Keys that
// EncodeKey cannot produce (bad prefix, bad escape, missing terminator,
// unknown slot, version at ts 0) give an error wrapping
// storage.ErrCorruption. Every physical key DecodeKey accepts re-encodes to
// the same bytes.
func DecodeKey(physical []byte) (logical []byte, kind KeyKind, ts Timestamp, err error) {
	if len(physical) == 0 || physical[0] != storage.PrefixData {
		return nil, 0, 0, corruptKeyf(physical, "missing data prefix")
	}
	rest := physical[1:]
	logical = make([]byte, 0, len(rest))
	for {
		i := bytes.IndexByte(rest, escapeByte)
		if i < 0 || i+1 >= len(rest) {
			return nil, 0, 0, corruptKeyf(physical, "unterminated logical key")
		}
		logical = append(logical, rest[:i]...)
		switch rest[i+1] {
		case escapedZero:
			logical = append(logical, escapeByte)
			rest = rest[i+2:]
			continue
		case terminatorByte:
			rest = rest[i+2:]
		default:
			return nil, 0, 0, corruptKeyf(physical, "bad escape byte %#x", rest[i+1])
		}
		break
	}
	switch {
	case len(rest) == 0:
		return logical, KindPlain, 0, nil
	case rest[0] == slotIntent && len(rest) == 1:
		return logical, KindIntent, 0, nil
	case rest[0] == slotVersion && len(rest) == versionSuffixBytes:
		ts = ^binary.BigEndian.Uint64(rest[1:])
		if ts == 0 {
			return nil, 0, 0, corruptKeyf(physical, "version at timestamp 0")
		}
		return logical, KindVersion, ts, nil
	default:
		return nil, 0, 0, corruptKeyf(physical, "bad slot %x", rest)
	}
}

func corruptKeyf(physical []byte, format string, args ...any) error {
	return fmt.Errorf("mvcc: physical key %x: %s: %w", physical, fmt.Sprintf(format, args...), storage.ErrCorruption)
}
