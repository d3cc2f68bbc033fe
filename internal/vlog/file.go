package vlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// FileName returns the base name of blob file num.
func FileName(num uint64) string { return fmt.Sprintf("%06d.blob", num) }

// ParseFileName returns the number of a blob file name and whether name is one.
func ParseFileName(name string) (uint64, bool) {
	var num uint64
	var rest string
	if n, _ := fmt.Sscanf(name, "%06d.%s", &num, &rest); n != 2 || rest != "blob" || FileName(num) != name {
		return 0, false
	}
	return num, true
}

// Writer appends records to one blob file. It is not safe for concurrent
// use; the caller serialises Append and Sync.
type Writer struct {
	f   vfs.File
	num uint64
	// end is the file length: the offset after the last record.
	end int64
	// synced is the prefix of the file known durable. Invariant: synced <= end.
	synced int64
	buf    []byte
	// WrittenBytes counts every byte written: records and padding.
	WrittenBytes int64
	// RecordBytes counts record bytes only; PaddingBytes the zero padding.
	RecordBytes, PaddingBytes int64
	// Placement of records larger than a block; set before the first Append.
	Placement Placement
	// offsets of the records, for the index written by Seal.
	offsets []int64
	sealed  bool
}

// NewWriter returns a Writer appending to f, an empty file numbered num.
func NewWriter(f vfs.File, num uint64) *Writer { return &Writer{f: f, num: num} }

// Num returns the file number.
func (w *Writer) Num() uint64 { return w.num }

// Size returns the file length in bytes.
func (w *Writer) Size() int64 { return w.end }

// Append writes one record, padded per the alignment invariant, and returns
// its Pointer. The record is not durable until Sync returns.
func (w *Writer) Append(key, value []byte) (Pointer, error) {
	if w.sealed {
		panic("vlog: append to a sealed file")
	}
	n := RecordBytes(len(key), len(value))
	start := Place(w.end, n, HeaderBytes+int64(len(key)), w.Placement)
	pad := start - w.end
	w.buf = w.buf[:0]
	for i := int64(0); i < pad; i++ {
		w.buf = append(w.buf, 0)
	}
	var err error
	if w.buf, err = AppendRecord(w.buf, key, value); err != nil {
		return Pointer{}, err
	}
	// Assert the alignment invariant right before the bytes reach disk.
	if n <= BlockBytes && start/BlockBytes != (start+n-1)/BlockBytes {
		panic(fmt.Sprintf("vlog: record [%d,%d) straddles a block", start, start+n))
	}
	if hb := HeaderBytes + int64(len(key)); hb <= BlockBytes && start/BlockBytes != (start+hb-1)/BlockBytes {
		panic(fmt.Sprintf("vlog: header and key at [%d,%d) straddle a block", start, start+hb))
	}
	if n > BlockBytes && w.Placement == AlignLarge && start%BlockBytes != 0 {
		panic(fmt.Sprintf("vlog: large record at unaligned offset %d", start))
	}
	if _, err := w.f.Write(w.buf); err != nil {
		return Pointer{}, fmt.Errorf("vlog: append to %s: %w", FileName(w.num), err)
	}
	if cap(w.buf) > 1<<20 {
		w.buf = nil // do not pin a huge buffer
	}
	w.end = start + n
	w.offsets = append(w.offsets, start)
	w.WrittenBytes += pad + n
	w.PaddingBytes += pad
	w.RecordBytes += n
	return Pointer{File: w.num, Offset: start, ValueBytes: uint32(len(value))}, nil
}

// Sync makes every appended record durable.
func (w *Writer) Sync() error {
	if w.synced == w.end {
		return nil
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("vlog: sync %s: %w", FileName(w.num), err)
	}
	w.synced = w.end
	return nil
}

// Close seals (unless already sealed), syncs and closes the file.
func (w *Writer) Close() error {
	var err error
	if !w.sealed {
		err = w.Seal()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadValue reads the record p names, verifies it and that it is stored
// under key, and returns its value in buf (grown as needed).
func ReadValue(r io.ReaderAt, p Pointer, key, buf []byte) ([]byte, error) {
	n := RecordBytes(len(key), int(p.ValueBytes))
	if int64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := r.ReadAt(buf, p.Offset); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %s beyond end of file", ErrCorruption, p)
		}
		return nil, fmt.Errorf("vlog: read %s: %w", p, err)
	}
	k, v, err := DecodeRecord(buf)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if !bytes.Equal(k, key) || len(v) != int(p.ValueBytes) {
		return nil, fmt.Errorf("%w: %s holds key %q (%d value bytes), want key %q", ErrCorruption, p, k, len(v), key)
	}
	return v, nil
}

// Iterator walks the records of one file in offset order without the LSM.
// It skips padding and holes (all-zero headers). Next reads only a record's
// header and key, so that a walk to decide liveness reads no values; the
// key of a dead record may have been punched to zeros, which is harmless:
// such a key never names a pointer to this record. Value reads and verifies
// the whole record.
type Iterator struct {
	r    io.ReaderAt
	size int64
	off  int64
	hdr  [HeaderBytes]byte
	buf  []byte
	cur  Entry
	err  error
	// indexed: visit offsets (a sealed file) instead of walking by lengths.
	indexed bool
	offsets []int64
	ordinal int
	// Skip, if set on an indexed iterator, is asked before a record is read:
	// true skips it without I/O. The caller uses it for records it already
	// knows dead (records never come back to life).
	Skip func(ordinal int) bool
}

// Entry is the record under an Iterator.
type Entry struct {
	Offset int64
	// Ordinal is the record's position in the file's index (indexed
	// iterators only).
	Ordinal int
	Header  Header
	// Key aliases the iterator's buffer until the next call to Next. It is
	// unverified (see Iterator).
	Key []byte
}

// Pointer returns the Pointer naming the entry.
func (e *Entry) Pointer(file uint64) Pointer {
	return Pointer{File: file, Offset: e.Offset, ValueBytes: e.Header.ValueBytes}
}

// NewIterator returns an iterator that walks the first size bytes of r by
// record lengths: for a file without an index (active, never punched).
func NewIterator(r io.ReaderAt, size int64) *Iterator { return &Iterator{r: r, size: size} }

// Next moves to the next record. It returns false at the end or on error.
func (it *Iterator) Next() bool {
	if it.err != nil {
		return false
	}
	if it.indexed {
		return it.nextIndexed()
	}
	for it.off < it.size {
		if rem := BlockBytes - it.off%BlockBytes; rem < HeaderBytes {
			it.off += rem
			continue
		}
		if it.off+HeaderBytes > it.size {
			return it.fail(fmt.Errorf("%w: torn header at offset %d (file is %d bytes)", ErrCorruption, it.off, it.size))
		}
		if _, err := it.r.ReadAt(it.hdr[:], it.off); err != nil {
			return it.fail(fmt.Errorf("vlog: read header at %d: %w", it.off, err))
		}
		h, err := decodeHeader(it.hdr[:])
		if errors.Is(err, errHole) {
			it.off += BlockBytes - it.off%BlockBytes
			continue
		}
		if err != nil {
			return it.fail(fmt.Errorf("at offset %d: %w", it.off, err))
		}
		n := h.RecordBytes()
		if it.off+n > it.size {
			return it.fail(fmt.Errorf("%w: torn record at offset %d (%d bytes, file is %d)", ErrCorruption, it.off, n, it.size))
		}
		if cap(it.buf) < int(h.KeyBytes) {
			it.buf = make([]byte, h.KeyBytes)
		}
		key := it.buf[:h.KeyBytes]
		if _, err := it.r.ReadAt(key, it.off+HeaderBytes); err != nil {
			return it.fail(fmt.Errorf("vlog: read key at %d: %w", it.off, err))
		}
		it.cur = Entry{Offset: it.off, Header: h, Key: key}
		it.off += n
		return true
	}
	return false
}

// Value reads the current record whole into buf (grown as needed),
// verifies it and returns its key and value. A record whose body fails its
// checksum is ErrCorruption: it was punched, so the caller must not have
// believed it live, or it is corrupt.
func (it *Iterator) Value(buf []byte) (key, value []byte, err error) {
	n := it.cur.Header.RecordBytes()
	if int64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := it.r.ReadAt(buf, it.cur.Offset); err != nil {
		return nil, nil, fmt.Errorf("vlog: read record at %d: %w", it.cur.Offset, err)
	}
	key, value, err = DecodeRecord(buf)
	if err != nil {
		return nil, nil, fmt.Errorf("record at %d: %w", it.cur.Offset, err)
	}
	return key, value, nil
}

func (it *Iterator) nextIndexed() bool {
	for len(it.offsets) > 0 {
		it.off = it.offsets[0]
		it.offsets = it.offsets[1:]
		ord := it.ordinal
		it.ordinal++
		if it.Skip != nil && it.Skip(ord) {
			continue
		}
		if _, err := it.r.ReadAt(it.hdr[:], it.off); err != nil {
			return it.fail(fmt.Errorf("vlog: read header at %d: %w", it.off, err))
		}
		h, err := decodeHeader(it.hdr[:])
		if errors.Is(err, errHole) {
			continue // punched: the record was dead
		}
		if err != nil {
			return it.fail(fmt.Errorf("at offset %d: %w", it.off, err))
		}
		n := h.RecordBytes()
		if it.off+n > it.size {
			return it.fail(fmt.Errorf("%w: record at %d (%d bytes) runs into the index at %d", ErrCorruption, it.off, n, it.size))
		}
		if cap(it.buf) < int(h.KeyBytes) {
			it.buf = make([]byte, h.KeyBytes)
		}
		key := it.buf[:h.KeyBytes]
		if _, err := it.r.ReadAt(key, it.off+HeaderBytes); err != nil {
			return it.fail(fmt.Errorf("vlog: read key at %d: %w", it.off, err))
		}
		it.cur = Entry{Offset: it.off, Ordinal: ord, Header: h, Key: key}
		return true
	}
	return false
}

func (it *Iterator) fail(err error) bool {
	it.err = err
	return false
}

// Entry returns the current record.
func (it *Iterator) Entry() *Entry { return &it.cur }

// Err returns the error that stopped the iteration, if any.
func (it *Iterator) Err() error { return it.err }

// Offset returns the offset the iterator stopped at: after an error, where
// the bad bytes begin (a torn tail starts there).
func (it *Iterator) Offset() int64 { return it.off }

// PunchHole deallocates [off, off+length) of f, keeping the file size, with
// fallocate(FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE). The span must be
// block aligned (its end may be the file's end). On a file system without a
// file descriptor (vfs.MemFS in tests) the span is overwritten with zeros,
// which reads back the same as a hole.
func PunchHole(f vfs.File, off, length int64) error {
	if off%BlockBytes != 0 || length <= 0 {
		panic(fmt.Sprintf("vlog: punch [%d,+%d) not block aligned", off, length))
	}
	if fd := f.Fd(); fd != vfs.InvalidFd {
		if err := unix.Fallocate(int(fd), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length); err != nil {
			return fmt.Errorf("vlog: punch [%d,+%d): %w", off, length, err)
		}
		return nil
	}
	zeros := make([]byte, min(length, 1<<20))
	for done := int64(0); done < length; {
		n := min(int64(len(zeros)), length-done)
		if _, err := f.WriteAt(zeros[:n], off+done); err != nil {
			return fmt.Errorf("vlog: zero [%d,+%d): %w", off+done, n, err)
		}
		done += n
	}
	return nil
}

// AllocatedBytes returns the bytes the file system has allocated to path
// (st_blocks * 512), which shrinks when holes are punched.
func AllocatedBytes(path string) (int64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("vlog: stat %s: %w", path, err)
	}
	return st.Blocks * 512, nil
}
