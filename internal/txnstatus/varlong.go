package txnstatus

import (
	"fmt"
	"math/bits"
)

// VarLong is an order-preserving, minimal, variable-length encoding of an
// unsigned 64-bit number. It is byte for byte AtlasDB's VAR_LONG, the
// encoding the record (seed 003) uses for v1 keys and values and for tickets
// columns: the record's examples 20 -> 0x14, 3141592 -> 0xe02fefd8 and
// -1 (as uint64, 2^64-1) -> 0xff80ffffffffffffffff are reproduced exactly
// (see TestVarLongRecordExamples).
//
// Layout. The count n of leading 1 bits of the first byte is the number of
// extra bytes; a 0 bit ends the prefix and the remaining bits, first byte
// then extra bytes, hold the number big-endian:
//
//	0xxxxxxx                          1 byte,  7 bits, < 2^7
//	10xxxxxx + 1 byte                 2 bytes, 14 bits
//	110xxxxx + 2 bytes                3 bytes, 21 bits  (< 2,097,152)
//	...
//	11111110 + 7 bytes                8 bytes, 56 bits
//	11111111 0xxxxxxx + 7 bytes       9 bytes, 63 bits
//	11111111 10xxxxxx + 8 bytes       10 bytes, 70 bits (the top 6 must be 0)
//
// The prefix continues into the second byte once the first is all ones.
//
// Invariants, enforced by DecodeVarLong:
//   - minimal: a number is always written in the shortest form that holds
//     it; a longer form is rejected as corruption, so each number has exactly
//     one encoding and a decoded key re-encodes to the same bytes;
//   - order preserving: for a < b, AppendVarLong(nil, a) < AppendVarLong(nil, b)
//     bytewise. Within one length the prefix is equal and the payload is
//     big-endian; a longer encoding holds a larger number (minimality) and
//     has more leading ones, so its first differing prefix bit is 1 where
//     the shorter one has the 0 terminator.
//
// Rejected alternative: a signed zig-zag or sign-flipped encoding, so that
// v1's -1 "aborted" value would be short. The record keeps -1 at 10 bytes in
// v1 and fixes the size problem in tickets (empty value for aborted); Canopy
// keeps v1 faithful as the baseline the tickets experiments measure against.

// VarLongBytesMax is the longest VarLong encoding.
const VarLongBytesMax = 10

// varLongBounds[n] is the smallest number that needs n+1 bytes.
var varLongBounds = [VarLongBytesMax]uint64{
	0, 1 << 7, 1 << 14, 1 << 21, 1 << 28, 1 << 35, 1 << 42, 1 << 49, 1 << 56, 1 << 63,
}

// VarLongLen returns the length of the encoding of v.
func VarLongLen(v uint64) int {
	n := 1
	for n < VarLongBytesMax && v >= varLongBounds[n] {
		n++
	}
	return n
}

// AppendVarLong appends the encoding of v to dst.
func AppendVarLong(dst []byte, v uint64) []byte {
	n := VarLongLen(v)
	switch {
	case n <= 8:
		// n-1 leading ones, a zero, then 8-n payload bits in the first byte.
		prefix := byte(0xff << (9 - n)) // n-1 ones in the top bits
		first := prefix | byte(v>>(8*(n-1)))
		dst = append(dst, first)
	case n == 9:
		dst = append(dst, 0xff, byte(v>>56)) // second byte 0xxxxxxx: v < 2^63
	default: // 10
		dst = append(dst, 0xff, 0x80) // second byte 10xxxxxx, payload bits all 0
		dst = append(dst, byte(v>>56))
	}
	for i := min(n-1, 7) - 1; i >= 0; i-- {
		dst = append(dst, byte(v>>(8*i)))
	}
	return dst
}

// DecodeVarLong decodes the VarLong at the start of b and returns the number
// and the count of bytes it took. It returns an error wrapping
// ErrCorruption if b is truncated, holds a non-minimal form, or holds a
// number of more than 64 bits. It never panics.
func DecodeVarLong(b []byte) (v uint64, n int, err error) {
	if len(b) == 0 {
		return 0, 0, fmt.Errorf("%w: empty varlong", ErrCorruption)
	}
	lead := bits.LeadingZeros8(^b[0]) // leading ones of the first byte
	var payloadStart int              // index of the first whole payload byte
	switch {
	case lead < 8:
		n = lead + 1
		v = uint64(b[0] & (0xff >> (lead + 1)))
		payloadStart = 1
	default:
		if len(b) < 2 {
			return 0, 0, fmt.Errorf("%w: truncated varlong %x", ErrCorruption, b)
		}
		switch lead2 := bits.LeadingZeros8(^b[1]); lead2 {
		case 0:
			n = 9
			v = uint64(b[1] & 0x7f)
		case 1:
			n = 10
			if b[1]&0x3f != 0 {
				return 0, 0, fmt.Errorf("%w: varlong %x exceeds 64 bits", ErrCorruption, b[:2])
			}
		default:
			return 0, 0, fmt.Errorf("%w: varlong prefix %x too long", ErrCorruption, b[:2])
		}
		payloadStart = 2
	}
	if len(b) < n {
		return 0, 0, fmt.Errorf("%w: truncated varlong %x, want %d bytes", ErrCorruption, b, n)
	}
	for _, c := range b[payloadStart:n] {
		v = v<<8 | uint64(c)
	}
	if VarLongLen(v) != n {
		return 0, 0, fmt.Errorf("%w: non-minimal varlong %x", ErrCorruption, b[:n])
	}
	return v, n, nil
}

// decodeWholeVarLong decodes b, which must be exactly one VarLong.
func decodeWholeVarLong(b []byte) (uint64, error) {
	v, n, err := DecodeVarLong(b)
	if err != nil {
		return 0, err
	}
	if n != len(b) {
		return 0, fmt.Errorf("%w: %d trailing bytes after varlong", ErrCorruption, len(b)-n)
	}
	return v, nil
}
