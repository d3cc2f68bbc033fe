package backup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/canopy-db/canopy/internal/keys"
)

var (
	// ErrDamaged: the backup directory is incomplete or its files do not
	// match its manifest (checksum, size, records, order). Nothing is
	// restored from it.
	ErrDamaged = errors.New("backup: damaged backup")
	// ErrExists: backup was asked to write into a non-empty directory.
	ErrExists = errors.New("backup: directory exists and is not empty")
	// ErrNotEmpty: restore was asked to load into a cluster that holds data.
	ErrNotEmpty = errors.New("backup: target cluster is not empty")
)

// Format identification.
const (
	ManifestName   = "MANIFEST"
	FormatName     = "canopy-backup"
	FormatVersion  = 1
	dataMagic      = "CANOPYBK"
	dataHeaderSize = len(dataMagic) + 4
	manifestSumTag = "sha256 "
)

// Limits of the format, checked when reading (a damaged length must not
// make the reader allocate without bound).
const (
	// ManifestBytesMax bounds the manifest (a file entry is a few hundred
	// bytes; 100,000 files of 64 MiB is 6 TiB).
	ManifestBytesMax = 64 << 20
	// FilesMax bounds the data files of one backup.
	FilesMax = 100_000
)

// dataName matches data file names, and only them.
var dataName = regexp.MustCompile(`^data-[0-9]{6}\.kv$`)

func dataFileName(i int) string { return fmt.Sprintf("data-%06d.kv", i) }

// Manifest describes a backup.
type Manifest struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// ClusterID of the cluster backed up.
	ClusterID string `json:"cluster_id"`
	// AtTs is the timestamp the backup reads at; AtTime the wall-clock
	// time its high bits hold (for people).
	AtTs   uint64 `json:"at_ts"`
	AtTime string `json:"at_time"`
	// StatusEncoding of the cluster backed up (for information: a backup
	// holds resolved values, no status records).
	StatusEncoding string `json:"status_encoding"`
	// Keys and Bytes (keys plus values) in all files.
	Keys  int64      `json:"keys"`
	Bytes int64      `json:"bytes"`
	Files []FileInfo `json:"files"`
}

// FileInfo describes one data file.
type FileInfo struct {
	Name string `json:"name"`
	// Size of the file in bytes, header included.
	Size int64 `json:"size"`
	Keys int64 `json:"keys"`
	// FirstKey and LastKey are user keys (JSON: base64).
	FirstKey []byte `json:"first_key"`
	LastKey  []byte `json:"last_key"`
	SHA256   string `json:"sha256"`
}

func damagedf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrDamaged}, args...)...)
}

// encodeManifest returns the manifest file's bytes: the JSON, a newline,
// and the checksum line.
func encodeManifest(m *Manifest) ([]byte, error) {
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	out := append(body, '\n')
	out = append(out, manifestSumTag...)
	out = append(out, hex.EncodeToString(sum[:])...)
	return append(out, '\n'), nil
}

// decodeManifest checks and decodes a manifest file's bytes.
func decodeManifest(b []byte) (*Manifest, error) {
	i := bytes.LastIndex(b, []byte("\n"+manifestSumTag))
	if i < 0 {
		return nil, damagedf("%s has no checksum line", ManifestName)
	}
	body, sumLine := b[:i], strings.TrimSpace(string(b[i+1+len(manifestSumTag):]))
	sum := sha256.Sum256(body)
	if sumLine != hex.EncodeToString(sum[:]) {
		return nil, damagedf("%s does not match its checksum", ManifestName)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, damagedf("%s: %v", ManifestName, err)
	}
	if m.Format != FormatName || m.Version != FormatVersion {
		return nil, damagedf("%s is format %q version %d; this canopy reads %q version %d", ManifestName, m.Format, m.Version, FormatName, FormatVersion)
	}
	if len(m.Files) > FilesMax {
		return nil, damagedf("%s lists %d files, above FilesMax=%d", ManifestName, len(m.Files), FilesMax)
	}
	var count int64
	for i, f := range m.Files {
		if f.Name != dataFileName(i+1) {
			return nil, damagedf("%s: file %d is named %q, want %q", ManifestName, i+1, f.Name, dataFileName(i+1))
		}
		if f.Keys < 0 || f.Size < int64(dataHeaderSize) {
			return nil, damagedf("%s: file %s has %d keys in %d bytes", ManifestName, f.Name, f.Keys, f.Size)
		}
		count += f.Keys
	}
	if count != m.Keys {
		return nil, damagedf("%s: files hold %d keys, the total says %d", ManifestName, count, m.Keys)
	}
	return &m, nil
}

// ReadManifest reads and checks the manifest of the backup in dir. A
// missing manifest means an incomplete backup (ErrDamaged).
func ReadManifest(dir string) (*Manifest, error) {
	p := filepath.Join(dir, ManifestName)
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat(dir); serr != nil {
			return nil, fmt.Errorf("backup directory %s: %w", dir, serr)
		}
		return nil, damagedf("%s has no %s: not a backup, or one that did not finish", dir, ManifestName)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, ManifestBytesMax+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if len(b) > ManifestBytesMax {
		return nil, damagedf("%s is above ManifestBytesMax=%d bytes", p, ManifestBytesMax)
	}
	return decodeManifest(b)
}

// dataWriter writes one data file, hashing what it writes.
type dataWriter struct {
	f    *os.File
	w    *bufio.Writer
	h    hash.Hash
	info FileInfo
}

func createDataFile(dir string, i int) (*dataWriter, error) {
	name := dataFileName(i)
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	d := &dataWriter{f: f, h: sha256.New(), info: FileInfo{Name: name}}
	d.w = bufio.NewWriterSize(io.MultiWriter(f, d.h), 1<<20)
	hdr := binary.BigEndian.AppendUint32([]byte(dataMagic), FormatVersion)
	if _, err := d.w.Write(hdr); err != nil {
		f.Close()
		return nil, err
	}
	d.info.Size = int64(len(hdr))
	return d, nil
}

func (d *dataWriter) add(k, v []byte) error {
	var buf [binary.MaxVarintLen64]byte
	for _, b := range [][]byte{k, v} {
		n := binary.PutUvarint(buf[:], uint64(len(b)))
		if _, err := d.w.Write(buf[:n]); err != nil {
			return err
		}
		if _, err := d.w.Write(b); err != nil {
			return err
		}
		d.info.Size += int64(n + len(b))
	}
	if d.info.Keys == 0 {
		d.info.FirstKey = append([]byte(nil), k...)
	}
	d.info.LastKey = append(d.info.LastKey[:0], k...)
	d.info.Keys++
	return nil
}

// finish flushes, fsyncs and closes the file and returns its description.
func (d *dataWriter) finish() (FileInfo, error) {
	err := d.w.Flush()
	if err == nil {
		err = d.f.Sync()
	}
	if cerr := d.f.Close(); err == nil {
		err = cerr
	}
	d.info.SHA256 = hex.EncodeToString(d.h.Sum(nil))
	return d.info, err
}

// readDataFile reads a data file whose description is fi, checking it
// against fi (size, checksum, key count, first and last key) and the
// format (records parse, keys strictly increase from after, within the
// limits of keys.go). fn, if not nil, gets each pair; it is called only
// once the whole file has checked out, so a damaged file hands out
// nothing. It returns the file's last key.
func readDataFile(dir string, fi FileInfo, after []byte, fn func(k, v []byte) error) ([]byte, error) {
	p := filepath.Join(dir, fi.Name)
	st, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, damagedf("data file %s is missing", fi.Name)
		}
		return nil, err
	}
	if st.Size() != fi.Size {
		return nil, damagedf("data file %s is %d bytes, the manifest says %d", fi.Name, st.Size(), fi.Size)
	}
	// Check first (checksum and records), then hand out: two passes, so
	// that nothing of a file whose records do not check out is loaded.
	last, err := scanDataFile(p, fi, after, nil)
	if err != nil || fn == nil {
		return last, err
	}
	return scanDataFile(p, fi, after, fn)
}

// scanDataFile reads and checks one data file; fn (if not nil) gets each
// pair as it is read.
func scanDataFile(p string, fi FileInfo, after []byte, fn func(k, v []byte) error) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The checksum first, so that any damaged byte is reported as such
	// (rather than as whatever record it broke), and no record of a
	// damaged file is handed out.
	h := sha256.New()
	if n, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("reading data file %s: %w", fi.Name, err)
	} else if n != fi.Size {
		return nil, damagedf("data file %s is %d bytes, the manifest says %d", fi.Name, n, fi.Size)
	}
	if hex.EncodeToString(h.Sum(nil)) != fi.SHA256 {
		return nil, damagedf("data file %s does not match its checksum", fi.Name)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(io.LimitReader(f, fi.Size), 1<<20)
	hdr := make([]byte, dataHeaderSize)
	if _, err := io.ReadFull(r, hdr); err != nil || string(hdr[:len(dataMagic)]) != dataMagic || binary.BigEndian.Uint32(hdr[len(dataMagic):]) != FormatVersion {
		return nil, damagedf("data file %s: bad header", fi.Name)
	}
	readBytes := func(what string, max uint64) ([]byte, error) {
		n, err := binary.ReadUvarint(r)
		if err != nil || n > max {
			return nil, damagedf("data file %s: bad %s length", fi.Name, what)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, damagedf("data file %s: truncated %s", fi.Name, what)
		}
		return b, nil
	}
	var count int64
	var first, last []byte
	prev := after
	for {
		if _, err := r.Peek(1); err == io.EOF {
			break
		}
		k, err := readBytes("key", keys.KeyBytesMax)
		if err != nil {
			return nil, err
		}
		v, err := readBytes("value", keys.ValueBytesMax)
		if err != nil {
			return nil, err
		}
		if prev != nil && bytes.Compare(k, prev) <= 0 {
			return nil, damagedf("data file %s: key %q does not follow %q", fi.Name, k, prev)
		}
		if count == 0 {
			first = k
		}
		prev, last = k, k
		count++
		if fn != nil {
			if err := fn(k, v); err != nil {
				return nil, err
			}
		}
	}
	if count != fi.Keys || !bytes.Equal(first, fi.FirstKey) || !bytes.Equal(last, fi.LastKey) {
		return nil, damagedf("data file %s holds %d keys [%q, %q], the manifest says %d [%q, %q]", fi.Name, count, first, last, fi.Keys, fi.FirstKey, fi.LastKey)
	}
	return last, nil
}

// Verify checks the backup in dir: the manifest, and every data file
// against it. It returns the manifest, or an error wrapping ErrDamaged.
func Verify(dir string) (*Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	var after []byte
	for _, fi := range m.Files {
		if after, err = readDataFile(dir, fi, after, nil); err != nil {
			return nil, err
		}
	}
	return m, nil
}
