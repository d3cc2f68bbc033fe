package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/client"
)

// mapSource is a Source over a sorted slice, ignoring the timestamp.
type mapSource struct{ kvs []client.KeyValue }

func (s *mapSource) ScanAt(_ context.Context, start, end []byte, _ uint64, limit int) ([]client.KeyValue, error) {
	i := sort.Search(len(s.kvs), func(i int) bool { return bytes.Compare(s.kvs[i].Key, start) >= 0 })
	var out []client.KeyValue
	for ; i < len(s.kvs) && (end == nil || bytes.Compare(s.kvs[i].Key, end) < 0) && len(out) < limit; i++ {
		out = append(out, s.kvs[i])
	}
	return out, nil
}

func newMapSource(n int) *mapSource {
	s := &mapSource{}
	for i := range n {
		s.kvs = append(s.kvs, client.KeyValue{Key: []byte(fmt.Sprintf("k%05d", i)), Value: bytes.Repeat([]byte{byte(i)}, i%50)})
	}
	s.kvs = append(s.kvs, client.KeyValue{Key: []byte("zz-empty-value"), Value: []byte{}})
	return s
}

// backupOf writes a backup of src in a new directory with small pages
// and files, so that both are many.
func backupOf(t *testing.T, src *mapSource) (string, *Manifest) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "b")
	var calls int
	m, err := Backup(context.Background(), src, dir, 12345, Options{PageKeys: 7, FileBytesTarget: 2048,
		ClusterID: "c1", StatusEncoding: "tickets", Progress: func(Progress) { calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	if calls == 0 {
		t.Errorf("no progress reported")
	}
	return dir, m
}

// TestBackupRoundTrip: a backup's files hold exactly the source's pairs,
// in order, over several files, and Verify accepts it.
func TestBackupRoundTrip(t *testing.T) {
	src := newMapSource(300)
	dir, m := backupOf(t, src)
	if len(m.Files) < 3 || m.Keys != int64(len(src.kvs)) || m.AtTs != 12345 || m.ClusterID != "c1" {
		t.Fatalf("manifest: %d files, %d keys, at %d, cluster %q", len(m.Files), m.Keys, m.AtTs, m.ClusterID)
	}
	if _, err := Verify(dir); err != nil {
		t.Fatal(err)
	}
	var got []client.KeyValue
	var after []byte
	for _, fi := range m.Files {
		var err error
		after, err = readDataFile(dir, fi, after, func(k, v []byte) error {
			got = append(got, client.KeyValue{Key: k, Value: v})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != len(src.kvs) {
		t.Fatalf("read %d pairs, want %d", len(got), len(src.kvs))
	}
	for i := range got {
		if !bytes.Equal(got[i].Key, src.kvs[i].Key) || !bytes.Equal(got[i].Value, src.kvs[i].Value) {
			t.Fatalf("pair %d: %q=%x, want %q=%x", i, got[i].Key, got[i].Value, src.kvs[i].Key, src.kvs[i].Value)
		}
	}
	// An empty keyspace backs up to a manifest alone.
	empty := filepath.Join(t.TempDir(), "e")
	if m, err := Backup(context.Background(), &mapSource{}, empty, 1, Options{}); err != nil || m.Keys != 0 || len(m.Files) != 0 {
		t.Fatalf("empty backup: %+v, %v", m, err)
	}
	if _, err := Verify(empty); err != nil {
		t.Fatal(err)
	}
}

// TestBackupRefusesNonEmptyDir: an existing backup is never overwritten.
func TestBackupRefusesNonEmptyDir(t *testing.T) {
	dir, _ := backupOf(t, newMapSource(10))
	if _, err := Backup(context.Background(), newMapSource(10), dir, 1, Options{}); !errors.Is(err, ErrExists) {
		t.Fatalf("backup into a used directory: %v, want ErrExists", err)
	}
}

// TestDamagedBackupIsRefused damages a good backup in each way a disk or
// an operator can, and checks that Verify refuses it with ErrDamaged and
// a message naming the problem.
func TestDamagedBackupIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		damage     func(t *testing.T, dir string, m *Manifest)
	}{
		{"flipped byte in a data file", "does not match its checksum", func(t *testing.T, dir string, m *Manifest) {
			p := filepath.Join(dir, m.Files[1].Name)
			b := readFile(t, p)
			b[len(b)/2] ^= 0x40
			writeFile(t, p, b)
		}},
		{"truncated data file", "bytes, the manifest says", func(t *testing.T, dir string, m *Manifest) {
			p := filepath.Join(dir, m.Files[0].Name)
			writeFile(t, p, readFile(t, p)[:m.Files[0].Size-3])
		}},
		{"missing data file", "is missing", func(t *testing.T, dir string, m *Manifest) {
			if err := os.Remove(filepath.Join(dir, m.Files[2].Name)); err != nil {
				t.Fatal(err)
			}
		}},
		{"data files swapped", "", func(t *testing.T, dir string, m *Manifest) {
			a, b := filepath.Join(dir, m.Files[0].Name), filepath.Join(dir, m.Files[1].Name)
			ba, bb := readFile(t, a), readFile(t, b)
			writeFile(t, a, bb)
			writeFile(t, b, ba)
		}},
		{"no manifest", "did not finish", func(t *testing.T, dir string, m *Manifest) {
			if err := os.Remove(filepath.Join(dir, ManifestName)); err != nil {
				t.Fatal(err)
			}
		}},
		{"edited manifest", "does not match its checksum", func(t *testing.T, dir string, m *Manifest) {
			p := filepath.Join(dir, ManifestName)
			writeFile(t, p, bytes.Replace(readFile(t, p), []byte(`"at_ts": 12345`), []byte(`"at_ts": 12346`), 1))
		}},
		{"truncated manifest", "no checksum line", func(t *testing.T, dir string, m *Manifest) {
			p := filepath.Join(dir, ManifestName)
			writeFile(t, p, readFile(t, p)[:100])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, m := backupOf(t, newMapSource(300))
			tc.damage(t, dir, m)
			_, err := Verify(dir)
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Verify: %v; want ErrDamaged mentioning %q", err, tc.want)
			}
		})
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// FuzzDecodeManifest: no manifest bytes make the decoder panic; what it
// accepts re-encodes to a manifest it accepts again.
func FuzzDecodeManifest(f *testing.F) {
	good, err := encodeManifest(&Manifest{Format: FormatName, Version: FormatVersion, Keys: 2,
		Files: []FileInfo{{Name: dataFileName(1), Size: 20, Keys: 2, SHA256: "00"}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte("{}\nsha256 00\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeManifest(b)
		if err != nil {
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("error %v is not ErrDamaged", err)
			}
			return
		}
		again, err := encodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeManifest(again); err != nil {
			t.Fatalf("re-encoded manifest refused: %v", err)
		}
	})
}

// FuzzDataFile: no data file bytes make the reader panic or hand out a
// pair unless the whole file matches its description.
func FuzzDataFile(f *testing.F) {
	dir := f.TempDir()
	d, err := createDataFile(dir, 1)
	if err != nil {
		f.Fatal(err)
	}
	_ = d.add([]byte("a"), []byte("1"))
	_ = d.add([]byte("b"), nil)
	fi, err := d.finish()
	if err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, fi.Name))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), fi.Name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		desc := fi
		desc.Size = int64(len(b))
		_, err := readDataFile(filepath.Dir(p), desc, nil, func(k, v []byte) error { return nil })
		if err != nil && !errors.Is(err, ErrDamaged) {
			t.Fatalf("error %v is not ErrDamaged", err)
		}
		if err == nil && !bytes.Equal(b, good) {
			t.Fatalf("accepted bytes %x that are not the file described", b)
		}
	})
}
