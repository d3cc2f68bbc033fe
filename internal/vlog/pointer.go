package vlog

import (
	"encoding/binary"
	"fmt"
)

// Pointer names a record: the blob file, the record's offset and the size
// of its value. The record's size follows from the key it is stored under:
// RecordBytes(len(key), ValueBytes).
type Pointer struct {
	File       uint64
	Offset     int64
	ValueBytes uint32
}

// Append appends the encoding of p to dst.
func (p Pointer) Append(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, p.File)
	dst = binary.AppendUvarint(dst, uint64(p.Offset))
	return binary.AppendUvarint(dst, uint64(p.ValueBytes))
}

// DecodePointer decodes a Pointer that fills b exactly.
func DecodePointer(b []byte) (Pointer, error) {
	var p Pointer
	var vals [3]uint64
	for i := range vals {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return Pointer{}, fmt.Errorf("%w: bad pointer encoding", ErrCorruption)
		}
		vals[i] = v
		b = b[n:]
	}
	if len(b) != 0 || vals[1] > 1<<62 || vals[2] > ValueBytesMax {
		return Pointer{}, fmt.Errorf("%w: bad pointer encoding", ErrCorruption)
	}
	p.File, p.Offset, p.ValueBytes = vals[0], int64(vals[1]), uint32(vals[2])
	return p, nil
}

func (p Pointer) String() string {
	return fmt.Sprintf("blob %06d@%d+%d", p.File, p.Offset, p.ValueBytes)
}
