package vlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Limits of the record format.
const (
	// BlockBytes is the alignment unit. It matches the file system block
	// size on ext4/xfs, the granularity at which a punched hole frees space.
	BlockBytes = 4096
	// HeaderBytes is the fixed header size of every record.
	HeaderBytes = 20
	// KeyBytesMax bounds a record's key.
	KeyBytesMax = 1 << 16
	// ValueBytesMax bounds a record's value (1 GiB).
	ValueBytesMax = 1 << 30
)

const recordMagic uint16 = 0xB10B

// ErrCorruption marks bytes read from a blob file that fail a check.
var ErrCorruption = errors.New("vlog: corruption")

// errHole is returned by decodeHeader for an all-zero header: padding or a
// punched block. It never escapes the package.
var errHole = errors.New("vlog: hole")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Header is a decoded record header.
//
// Layout (little endian):
//
//	[0:2)   magic 0xB10B
//	[2:4)   flags, zero
//	[4:8)   key length
//	[8:12)  value length
//	[12:16) CRC-32C of key||value
//	[16:20) CRC-32C of bytes [0:16)
//
// The header has its own checksum so that a record whose body was punched
// (it was dead) can still be stepped over by its length.
type Header struct {
	KeyBytes   uint32
	ValueBytes uint32
	BodyCRC    uint32
}

// RecordBytes returns the size of the whole record.
func (h Header) RecordBytes() int64 { return RecordBytes(int(h.KeyBytes), int(h.ValueBytes)) }

// RecordBytes returns the size of a record with the given key and value sizes.
func RecordBytes(keyBytes, valueBytes int) int64 {
	return HeaderBytes + int64(keyBytes) + int64(valueBytes)
}

// Placement chooses where a record larger than a block starts.
type Placement uint8

const (
	// PackLarge (the default): a record larger than a block starts where
	// the file ends, unless its header and key would not fit in the rest
	// of the current block, in which case it starts at the next boundary.
	// Headers and keys thus never straddle a block (so punching zeroes a
	// header whole or not at all), and large records waste no padding;
	// their partial edge blocks are freed once both neighbours are dead.
	PackLarge Placement = iota
	// AlignLarge: every record larger than a block starts at a block
	// boundary, the layout the proposal measured. It frees a dead record's
	// blocks at once but pads each large record up to a whole number of
	// blocks: for values just above a multiple of 4 KiB, close to a block.
	AlignLarge
)

// Place returns the offset at which a record of recordBytes, whose header
// and key take headBytes, is written when the file currently ends at end.
// See the alignment invariant in doc.go.
func Place(end, recordBytes, headBytes int64, p Placement) int64 {
	inBlock := end % BlockBytes
	if inBlock == 0 {
		return end
	}
	next := end - inBlock + BlockBytes
	switch {
	case recordBytes <= BlockBytes:
		if inBlock+recordBytes > BlockBytes {
			return next
		}
	case p == AlignLarge || inBlock+headBytes > BlockBytes:
		return next
	}
	return end
}

// AppendRecord appends the encoded record for key and value to dst.
func AppendRecord(dst, key, value []byte) ([]byte, error) {
	if len(key) > KeyBytesMax || len(value) > ValueBytesMax {
		return dst, fmt.Errorf("vlog: record too large: key %d bytes (max %d), value %d bytes (max %d)",
			len(key), KeyBytesMax, len(value), ValueBytesMax)
	}
	var h [HeaderBytes]byte
	binary.LittleEndian.PutUint16(h[0:], recordMagic)
	binary.LittleEndian.PutUint32(h[4:], uint32(len(key)))
	binary.LittleEndian.PutUint32(h[8:], uint32(len(value)))
	crc := crc32.Update(0, crcTable, key)
	crc = crc32.Update(crc, crcTable, value)
	binary.LittleEndian.PutUint32(h[12:], crc)
	binary.LittleEndian.PutUint32(h[16:], crc32.Checksum(h[:16], crcTable))
	dst = append(dst, h[:]...)
	dst = append(dst, key...)
	return append(dst, value...), nil
}

// decodeHeader decodes and checks a header. An all-zero header is errHole.
func decodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderBytes {
		return Header{}, fmt.Errorf("%w: short header (%d bytes)", ErrCorruption, len(b))
	}
	b = b[:HeaderBytes]
	zero := true
	for _, c := range b {
		if c != 0 {
			zero = false
			break
		}
	}
	if zero {
		return Header{}, errHole
	}
	if m := binary.LittleEndian.Uint16(b[0:]); m != recordMagic {
		return Header{}, fmt.Errorf("%w: bad magic %#x", ErrCorruption, m)
	}
	if got, want := crc32.Checksum(b[:16], crcTable), binary.LittleEndian.Uint32(b[16:]); got != want {
		return Header{}, fmt.Errorf("%w: header checksum %#x, want %#x", ErrCorruption, got, want)
	}
	if f := binary.LittleEndian.Uint16(b[2:]); f != 0 {
		return Header{}, fmt.Errorf("%w: unknown flags %#x", ErrCorruption, f)
	}
	h := Header{
		KeyBytes:   binary.LittleEndian.Uint32(b[4:]),
		ValueBytes: binary.LittleEndian.Uint32(b[8:]),
		BodyCRC:    binary.LittleEndian.Uint32(b[12:]),
	}
	if h.KeyBytes > KeyBytesMax || h.ValueBytes > ValueBytesMax {
		return Header{}, fmt.Errorf("%w: lengths out of range (key %d, value %d)", ErrCorruption, h.KeyBytes, h.ValueBytes)
	}
	return h, nil
}

// DecodeRecord decodes a whole record from b, verifying both checksums. The
// returned slices alias b. A hole (all-zero header) is reported as
// corruption: a reader that follows a pointer must never land on one.
func DecodeRecord(b []byte) (key, value []byte, err error) {
	h, err := decodeHeader(b)
	if errors.Is(err, errHole) {
		return nil, nil, fmt.Errorf("%w: record header is zero (hole or padding)", ErrCorruption)
	}
	if err != nil {
		return nil, nil, err
	}
	n := h.RecordBytes()
	if int64(len(b)) < n {
		return nil, nil, fmt.Errorf("%w: record of %d bytes truncated to %d", ErrCorruption, n, len(b))
	}
	body := b[HeaderBytes:n]
	if got := crc32.Checksum(body, crcTable); got != h.BodyCRC {
		return nil, nil, fmt.Errorf("%w: body checksum %#x, want %#x", ErrCorruption, got, h.BodyCRC)
	}
	return body[:h.KeyBytes], body[h.KeyBytes:], nil
}
