package vlog

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

type rec struct {
	p   Pointer
	key []byte
	val []byte
}

func writeFile(t *testing.T, fs vfs.FS, path string, rng *rand.Rand, n int) []rec {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(f, 1)
	var recs []rec
	for i := 0; i < n; i++ {
		key := []byte(fmt.Sprintf("key-%04d", i))
		val := bytes.Repeat([]byte{byte('a' + i%26)}, 1+rng.IntN(10000))
		p, err := w.Append(key, val)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec{p, key, val})
	}
	if w.PaddingBytes+w.RecordBytes != w.Size() || w.WrittenBytes != w.Size() {
		t.Fatalf("sizes: pad %d rec %d size %d", w.PaddingBytes, w.RecordBytes, w.Size())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestWriterIteratorPunch(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	fs := vfs.NewMem()
	recs := writeFile(t, fs, "f", rng, 200)
	f, err := fs.OpenReadWrite("f", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	for _, r := range recs {
		n := RecordBytes(len(r.key), len(r.val))
		if n <= BlockBytes && r.p.Offset/BlockBytes != (r.p.Offset+n-1)/BlockBytes {
			t.Fatalf("record at %d of %d bytes straddles", r.p.Offset, n)
		}
		if h := int64(HeaderBytes + len(r.key)); r.p.Offset/BlockBytes != (r.p.Offset+h-1)/BlockBytes {
			t.Fatalf("header of record at %d straddles", r.p.Offset)
		}
		v, err := ReadValue(f, r.p, r.key, nil)
		if err != nil || !bytes.Equal(v, r.val) {
			t.Fatalf("read %v: %v", r.p, err)
		}
		if _, err := ReadValue(f, r.p, []byte("other"), nil); err == nil {
			t.Fatal("read under the wrong key succeeded")
		}
	}
	// Kill a random half, punch the holes, and walk the file.
	live := map[int64]bool{}
	var spans []Span
	for _, r := range recs {
		if rng.IntN(2) == 0 {
			live[r.p.Offset] = true
			spans = append(spans, Span{r.p.Offset, RecordBytes(len(r.key), len(r.val))})
		}
	}
	idx, err := IndexSpan(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range HoleSpans(append(spans, idx), st.Size()) {
		if err := PunchHole(f, h.Offset, h.Bytes); err != nil {
			t.Fatal(err)
		}
	}
	it, err := NewSealedIterator(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for it.Next() {
		en := it.Entry()
		if live[en.Offset] {
			seen++
			k, v, err := it.Value(nil)
			if err != nil {
				t.Fatalf("live record at %d: %v", en.Offset, err)
			}
			if want := recs[indexOf(recs, en.Offset)]; !bytes.Equal(k, want.key) || !bytes.Equal(v, want.val) {
				t.Fatalf("live record at %d differs", en.Offset)
			}
		}
	}
	if it.Err() != nil || seen != len(live) {
		t.Fatalf("iterated %d of %d live records, err %v", seen, len(live), it.Err())
	}
	for _, r := range recs {
		if live[r.p.Offset] {
			if _, err := ReadValue(f, r.p, r.key, nil); err != nil {
				t.Fatalf("live record punched: %v", err)
			}
		}
	}
}

func indexOf(recs []rec, off int64) int {
	for i, r := range recs {
		if r.p.Offset == off {
			return i
		}
	}
	return -1
}

func TestIteratorTornTail(t *testing.T) {
	fs := vfs.NewMem()
	recs := writeFile(t, fs, "f", rand.New(rand.NewPCG(1, 2)), 20)
	f, _ := fs.Open("f")
	defer f.Close()
	last := recs[len(recs)-1]
	it := NewIterator(f, last.p.Offset+10) // the last record is torn
	n := 0
	for it.Next() {
		n++
	}
	if n != len(recs)-1 || it.Err() == nil || it.Offset() != last.p.Offset {
		t.Fatalf("n=%d err=%v offset=%d want %d", n, it.Err(), it.Offset(), last.p.Offset)
	}
}

// TestPunchRealFile checks, on the real file system, that punching frees
// blocks (st_blocks shrinks) while the size stays and live records read back.
func TestPunchRealFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	rng := rand.New(rand.NewPCG(3, 4))
	recs := writeFile(t, vfs.Default, path, rng, 300)
	f, err := vfs.Default.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st0, _ := os.Stat(path)
	alloc0, err := AllocatedBytes(path)
	if err != nil {
		t.Fatal(err)
	}
	var live []Span
	var liveRecs []rec
	for i, r := range recs {
		if i%3 == 0 {
			live = append(live, Span{r.p.Offset, RecordBytes(len(r.key), len(r.val))})
			liveRecs = append(liveRecs, r)
		}
	}
	var holes int64
	idx, err := IndexSpan(f, st0.Size())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range HoleSpans(append(live, idx), st0.Size()) {
		if err := PunchHole(f, h.Offset, h.Bytes); err != nil {
			t.Skipf("file system cannot punch holes: %v", err)
		}
		holes += h.Bytes
	}
	st1, _ := os.Stat(path)
	alloc1, _ := AllocatedBytes(path)
	if st1.Size() != st0.Size() {
		t.Fatalf("size changed %d -> %d", st0.Size(), st1.Size())
	}
	if alloc1 >= alloc0 || alloc0-alloc1 < holes/2 {
		t.Fatalf("allocated %d -> %d after punching %d bytes", alloc0, alloc1, holes)
	}
	for _, r := range liveRecs {
		if v, err := ReadValue(f, r.p, r.key, nil); err != nil || !bytes.Equal(v, r.val) {
			t.Fatalf("live record after punch: %v", err)
		}
	}
}

// BenchmarkPunchHoleBlock measures one fallocate(PUNCH_HOLE) of a single
// block in a synced file on the real file system (the cost that dominates
// punch-mode GC for values under ~64 KiB; see docs/BENCHMARKS.md).
func BenchmarkPunchHoleBlock(b *testing.B) {
	path := filepath.Join(b.TempDir(), "f")
	f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	// Every third block is punched, so each call frees a block of its own.
	blocks := int64(b.N)*3 + 1
	buf := bytes.Repeat([]byte{1}, BlockBytes)
	for i := int64(0); i < blocks; i++ {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := PunchHole(f, int64(i)*3*BlockBytes, BlockBytes); err != nil {
			b.Skipf("cannot punch: %v", err)
		}
	}
}
