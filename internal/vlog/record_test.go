package vlog

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestPlace(t *testing.T) {
	for _, tc := range []struct {
		end, n, head int64
		p            Placement
		want         int64
	}{
		{0, 100, 30, PackLarge, 0},
		{100, 100, 30, PackLarge, 100},
		{4000, 96, 30, PackLarge, 4000},    // ends exactly at the boundary
		{4000, 97, 30, PackLarge, 4096},    // would straddle
		{4096, 4096, 30, PackLarge, 4096},  // a full block at a boundary
		{100, 4096, 30, PackLarge, 4096},   // a full block never straddles
		{100, 5000, 30, PackLarge, 100},    // larger than a block: packed
		{100, 5000, 30, AlignLarge, 4096},  // ... or aligned
		{4070, 5000, 30, PackLarge, 4096},  // header and key would straddle
		{4066, 5000, 30, PackLarge, 4066},  // header and key just fit
		{8192, 9000, 30, AlignLarge, 8192}, // already aligned
		{12000, 10, 5, PackLarge, 12000},   // small record after a large one
		{4095, 1, 1, PackLarge, 4095},      // last byte of a block
		{4095, 2, 2, PackLarge, 4096},      // one byte too many
	} {
		if got := Place(tc.end, tc.n, tc.head, tc.p); got != tc.want {
			t.Errorf("Place(%d, %d, %d, %d) = %d, want %d", tc.end, tc.n, tc.head, tc.p, got, tc.want)
		}
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for _, vb := range []int{0, 1, 4000, 4096, 100000} {
		key := []byte("key-1")
		val := bytes.Repeat([]byte{'v'}, vb)
		b, err := AppendRecord(nil, key, val)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) != RecordBytes(len(key), vb) {
			t.Fatalf("record of %d bytes, want %d", len(b), RecordBytes(len(key), vb))
		}
		k, v, err := DecodeRecord(b)
		if err != nil || !bytes.Equal(k, key) || !bytes.Equal(v, val) {
			t.Fatalf("decode: %q %d %v", k, len(v), err)
		}
		// Every single-byte flip is detected.
		for i := 0; i < len(b); i += 1 + len(b)/64 {
			c := append([]byte(nil), b...)
			c[i] ^= 0x40
			if _, _, err := DecodeRecord(c); !errors.Is(err, ErrCorruption) {
				t.Fatalf("flip at %d of %d: err %v, want corruption", i, len(b), err)
			}
		}
		// Truncation is detected.
		if _, _, err := DecodeRecord(b[:len(b)-1]); !errors.Is(err, ErrCorruption) && vb > 0 {
			t.Fatalf("truncated: %v", err)
		}
	}
}

func TestDecodeZeroIsCorruption(t *testing.T) {
	if _, _, err := DecodeRecord(make([]byte, 64)); !errors.Is(err, ErrCorruption) {
		t.Fatalf("zeros decoded: %v", err)
	}
}

func TestPointerRoundTrip(t *testing.T) {
	for _, p := range []Pointer{{}, {File: 1, Offset: 4096, ValueBytes: 8192}, {File: 1 << 40, Offset: 1 << 50, ValueBytes: ValueBytesMax}} {
		q, err := DecodePointer(p.Append(nil))
		if err != nil || q != p {
			t.Fatalf("%v -> %v, %v", p, q, err)
		}
	}
	if _, err := DecodePointer([]byte{0x80}); !errors.Is(err, ErrCorruption) {
		t.Fatalf("bad pointer: %v", err)
	}
	if _, err := DecodePointer(append(Pointer{File: 1}.Append(nil), 0)); !errors.Is(err, ErrCorruption) {
		t.Fatalf("trailing byte: %v", err)
	}
}

func TestFileMetaRoundTrip(t *testing.T) {
	m := FileMeta{State: FileSealed, SizeBytes: 123, RecordBytes: 100, PunchedDiscardBytes: 7}
	got, err := DecodeFileMeta(m.Encode())
	if err != nil || got != m {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := DecodeFileMeta([]byte{9}); !errors.Is(err, ErrCorruption) {
		t.Fatal(err)
	}
}

func TestParseFileName(t *testing.T) {
	if n, ok := ParseFileName(FileName(42)); !ok || n != 42 {
		t.Fatal(n, ok)
	}
	for _, s := range []string{"000042.sst", "42.blob", "x.blob", "000042.blobx"} {
		if _, ok := ParseFileName(s); ok {
			t.Fatalf("%q parsed", s)
		}
	}
}

// FuzzDecodeRecord: the decoder never panics, and what it accepts
// re-encodes to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	b, _ := AppendRecord(nil, []byte("k"), []byte("value"))
	f.Add(b)
	f.Add(make([]byte, HeaderBytes))
	f.Add([]byte{0x0b, 0xb1})
	f.Fuzz(func(t *testing.T, data []byte) {
		k, v, err := DecodeRecord(data)
		if err != nil {
			if !errors.Is(err, ErrCorruption) {
				t.Fatalf("error not corruption: %v", err)
			}
			return
		}
		re, err := AppendRecord(nil, k, v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(re, data[:len(re)]) {
			t.Fatal("accepted record does not re-encode to itself")
		}
	})
}

// FuzzDecodePointer: never panics; accepted pointers re-encode identically.
func FuzzDecodePointer(f *testing.F) {
	f.Add(Pointer{File: 3, Offset: 4096, ValueBytes: 10}.Append(nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodePointer(data)
		if err != nil {
			return
		}
		if q, err := DecodePointer(p.Append(nil)); err != nil || q != p {
			t.Fatalf("%v -> %v %v", p, q, err)
		}
	})
}

// FuzzReadIndex: a sealed file's index and trailer, read from arbitrary
// bytes, never panic, and accepted offsets are increasing and before the
// index.
func FuzzReadIndex(f *testing.F) {
	fs := vfs.NewMem()
	wf, _ := fs.Create("f", vfs.WriteCategoryUnspecified)
	w := NewWriter(wf, 1)
	for i := 0; i < 5; i++ {
		_, _ = w.Append([]byte("key"), bytes.Repeat([]byte{'v'}, 1000*i))
	}
	_ = w.Close()
	rf, _ := fs.Open("f")
	st, _ := rf.Stat()
	good := make([]byte, st.Size())
	_, _ = rf.ReadAt(good, 0)
	f.Add(good)
	f.Add(good[len(good)-TrailerBytes:])
	f.Fuzz(func(t *testing.T, data []byte) {
		offsets, end, err := ReadIndex(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		prev := int64(-1)
		for _, o := range offsets {
			if o <= prev || o >= end {
				t.Fatalf("offsets %v, index at %d", offsets, end)
			}
			prev = o
		}
		it, err := NewSealedIterator(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatalf("index read once but not twice: %v", err)
		}
		for it.Next() {
			_, _, _ = it.Value(nil)
		}
	})
}

// FuzzDecodeFileMeta: never panics; accepted metas re-encode identically.
func FuzzDecodeFileMeta(f *testing.F) {
	f.Add(FileMeta{State: FileSealed, SizeBytes: 1, RecordBytes: 2}.Encode())
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeFileMeta(data)
		if err != nil {
			return
		}
		if !bytes.Equal(m.Encode(), data) {
			t.Fatal("accepted meta does not re-encode to itself")
		}
	})
}
