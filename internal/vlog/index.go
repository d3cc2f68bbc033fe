package vlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// A sealed blob file ends with an index of its record offsets:
//
//	records ... | index | trailer
//	index:   uvarint deltas of the record offsets, in order
//	trailer: index offset (8) | index bytes (4) | CRC-32C of index (4) | magic (8)
//
// Why: after punching, a block may begin with the tail of a large dead
// record whose header (in an earlier block) is gone. A walk by lengths
// cannot resync there, and scanning for something that parses as a header
// could be fooled by value bytes. The index gives every record start, so GC
// can iterate a punched file without the LSM. Punching treats the index and
// trailer as live. Active files have no index and are never punched; they
// are walked by lengths.
const (
	TrailerBytes        = 24
	trailerMagic uint64 = 0xB10BF11E5EA1ED00
)

// Seal writes the index and trailer after the last record and syncs. The
// Writer must not be appended to afterwards.
func (w *Writer) Seal() error {
	buf := indexBlock(w.offsets, w.end)
	if _, err := w.f.Write(buf); err != nil {
		return fmt.Errorf("vlog: write index of %s: %w", FileName(w.num), err)
	}
	w.end += int64(len(buf))
	w.WrittenBytes += int64(len(buf))
	w.sealed = true
	return w.Sync()
}

// indexBlock is what seals a file: the index of offsets, then the trailer
// (where the index starts, its length, its checksum, the magic). Both the
// writer and recovery seal files with it, so they cannot disagree.
func indexBlock(offsets []int64, at int64) []byte {
	idx := appendIndex(nil, offsets)
	buf := idx
	buf = binary.LittleEndian.AppendUint64(buf, uint64(at))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(idx)))
	buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(idx, crcTable))
	return binary.LittleEndian.AppendUint64(buf, trailerMagic)
}

func appendIndex(dst []byte, offsets []int64) []byte {
	prev := int64(0)
	for _, o := range offsets {
		dst = binary.AppendUvarint(dst, uint64(o-prev))
		prev = o
	}
	return dst
}

// WriteIndexAt appends an index of offsets at off (the end of f, possibly
// after torn bytes that the index leaves out) and returns the new size. It
// is how recovery seals a file that was active at a crash.
func WriteIndexAt(f io.WriterAt, off int64, offsets []int64) (int64, error) {
	buf := indexBlock(offsets, off)
	if _, err := f.WriteAt(buf, off); err != nil {
		return 0, fmt.Errorf("vlog: write index: %w", err)
	}
	return off + int64(len(buf)), nil
}

// ReadIndex reads the index of a sealed file of size bytes: the record
// offsets and where the index begins (the records end before it).
func ReadIndex(r io.ReaderAt, size int64) (offsets []int64, indexOffset int64, err error) {
	if size < TrailerBytes {
		return nil, 0, fmt.Errorf("%w: sealed file of %d bytes has no trailer", ErrCorruption, size)
	}
	var t [TrailerBytes]byte
	if _, err := r.ReadAt(t[:], size-TrailerBytes); err != nil {
		return nil, 0, fmt.Errorf("vlog: read trailer: %w", err)
	}
	if binary.LittleEndian.Uint64(t[16:]) != trailerMagic {
		return nil, 0, fmt.Errorf("%w: bad trailer magic", ErrCorruption)
	}
	indexOffset = int64(binary.LittleEndian.Uint64(t[0:]))
	n := int64(binary.LittleEndian.Uint32(t[8:]))
	if indexOffset < 0 || indexOffset+n+TrailerBytes != size {
		return nil, 0, fmt.Errorf("%w: trailer names index [%d,+%d) in a file of %d bytes", ErrCorruption, indexOffset, n, size)
	}
	idx := make([]byte, n)
	if _, err := r.ReadAt(idx, indexOffset); err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, fmt.Errorf("vlog: read index: %w", err)
	}
	if crc32.Checksum(idx, crcTable) != binary.LittleEndian.Uint32(t[12:]) {
		return nil, 0, fmt.Errorf("%w: index checksum", ErrCorruption)
	}
	prev := int64(0)
	for len(idx) > 0 {
		d, k := binary.Uvarint(idx)
		if k <= 0 || (len(offsets) > 0 && d == 0) || prev+int64(d) >= indexOffset {
			return nil, 0, fmt.Errorf("%w: bad index entry", ErrCorruption)
		}
		prev += int64(d)
		offsets = append(offsets, prev)
		idx = idx[k:]
	}
	return offsets, indexOffset, nil
}

// NewSealedIterator returns an iterator over a sealed file of size bytes
// that visits the offsets of its index. A record whose header was punched
// (it was dead) is skipped.
func NewSealedIterator(r io.ReaderAt, size int64) (*Iterator, error) {
	offsets, end, err := ReadIndex(r, size)
	if err != nil {
		return nil, err
	}
	return &Iterator{r: r, size: end, offsets: offsets, indexed: true}, nil
}

// IndexSpan returns the span of a sealed file's index and trailer, which
// punching must keep.
func IndexSpan(r io.ReaderAt, size int64) (Span, error) {
	_, off, err := ReadIndex(r, size)
	if err != nil {
		return Span{}, err
	}
	return Span{Offset: off, Bytes: size - off}, nil
}

// ReadHeader reads and checks the header of the record at off.
func ReadHeader(r io.ReaderAt, off int64) (Header, error) {
	var b [HeaderBytes]byte
	if _, err := r.ReadAt(b[:], off); err != nil {
		return Header{}, fmt.Errorf("vlog: read header at %d: %w", off, err)
	}
	h, err := decodeHeader(b[:])
	if errors.Is(err, errHole) {
		return Header{}, fmt.Errorf("%w: header at %d is zero", ErrCorruption, off)
	}
	return h, err
}
