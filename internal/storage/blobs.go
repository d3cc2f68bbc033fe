package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/canopy-db/canopy/internal/vlog"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The blob manifest lives in the engine under node-local keys, so that it
// changes atomically with the write batches that change the LSM:
//
//	metaPrefix    + file number (8 bytes BE) -> vlog.FileMeta
//	discardPrefix + file number (8 bytes BE) -> int64 LE, a merge counter of
//	                                            the record bytes that died
//
// Rejected alternative: a separate manifest file. Discard counts must change
// in the same atomic write as the pointer that kills a record, or a crash
// between the two leaves them wrong; only the engine's batch gives that.
var (
	metaPrefix    = NodeLocalKey("vlog/meta/")
	discardPrefix = NodeLocalKey("vlog/discard/")
)

func metaKey(num uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), metaPrefix...), num)
}
func discardKey(num uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), discardPrefix...), num)
}

// blobFile is one blob file known to the manifest.
type blobFile struct {
	num uint64
	// f is a read-write handle used for reads and punches; safe for
	// concurrent ReadAt.
	f vfs.File
	// Fields below are guarded by blobSet.mu.
	meta    vlog.FileMeta
	discard int64
	// punchedBytes: bytes punched so far (the allocation estimate where
	// stat cannot tell, i.e. on vfs.MemFS).
	punchedBytes int64
	// punched marks the blocks already punched in this process, so that a
	// later punch of the file skips them: each fallocate call is a journal
	// transaction, and re-punching every earlier hole made punch rounds
	// grow with the file's age. Not persisted: after a restart the first
	// punch of a file re-punches its old holes once, which is harmless.
	punched blockSet
	// dead marks, by index ordinal, records known dead, so that walks skip
	// them without I/O or an LSM read (a dead record never becomes live
	// again). deadComplete: every dead record is marked or waits in
	// newlyDead, set by a full walk; then punching needs no walk (see
	// punch). index, indexEnd: the file's record offsets and where its
	// index begins, loaded by that walk. Only GC touches these four;
	// rounds are serialised.
	dead         blockSet
	deadComplete bool
	index        []int64
	indexEnd     int64
	// newlyDead: offsets of records killed since GC last looked, reported
	// by the write path after its batch committed. Guarded by blobSet.mu.
	newlyDead []int64
	// deadOverflow: reports were dropped; the next punch walks the file.
	// Guarded by blobSet.mu.
	deadOverflow bool
	// obsoleteEpoch: the reader-gate epoch fenced when the file became
	// obsolete; it is deleted once readers up to it have drained.
	obsoleteEpoch uint64
}

// blockSet is a bitmap of block numbers.
type blockSet []uint64

func (b blockSet) has(i int64) bool { return i/64 < int64(len(b)) && b[i/64]&(1<<(i%64)) != 0 }

func (b *blockSet) add(i int64) {
	for i/64 >= int64(len(*b)) {
		*b = append(*b, 0)
	}
	(*b)[i/64] |= 1 << (i % 64)
}

// BlobStats are counters of the value log, for benchmarks and metrics.
type BlobStats struct {
	Files int
	// SizeBytes: sum of file lengths. AllocatedBytes: sum of st_blocks*512
	// (real file system) or of lengths minus punched bytes (in memory).
	SizeBytes, AllocatedBytes int64
	// RecordBytes, DiscardBytes: sums over files (live = Record - Discard).
	RecordBytes, DiscardBytes int64
	// ForegroundWrittenBytes: bytes appended by writes (records + padding).
	// PaddingBytes: the padding part of all appends.
	ForegroundWrittenBytes, PaddingBytes int64
	// GCRewrittenBytes: bytes appended by rewrite/merge jobs (records +
	// padding). GCPunchedBytes: bytes deallocated by punching.
	GCRewrittenBytes, GCPunchedBytes int64
	// GC jobs run.
	GCRewriteJobs, GCPunchJobs int64
}

type blobSet struct {
	e      *Engine
	fs     vfs.FS
	dir    string
	realFS bool

	mu struct {
		sync.Mutex
		files   map[uint64]*blobFile
		nextNum uint64
	}
	// wmu serialises the foreground writer: appends, sync, rotation.
	wmu sync.Mutex
	w   *vlog.Writer // guarded by wmu; nil until the first separated value
	// pending counts, per file, the batches that appended to it and have
	// not finished committing; retiring holds writers rotated out but not
	// yet sealed. Both guarded by wmu.
	//
	// Invariant: a file is sealed only when no batch that appended to it is
	// still in flight. Sealing records its record bytes as final and stops
	// recovery from rescanning it, so a batch that appended and then failed
	// to commit (a crash) after the seal would leave dead bytes uncounted.
	pending  map[uint64]int
	retiring map[uint64]*vlog.Writer

	foregroundBytes, paddingBytes, gcRewrittenBytes, gcPunchedBytes atomic.Int64
	gcRewriteJobs, gcPunchJobs                                      atomic.Int64
	// hasFiles: the manifest names at least one file (see needsAccounting).
	hasFiles atomic.Bool
}

// needsAccounting reports whether data writes must go through the
// accounting commit path: the mode separates, or blob files exist from an
// earlier run in such a mode whose pointers an overwrite may kill.
func (e *Engine) needsAccounting() bool {
	return e.opts.Mode.separates() || e.blobs.hasFiles.Load()
}

func (s *blobSet) path(num uint64) string { return filepath.Join(s.dir, vlog.FileName(num)) }

// openBlobSet loads the manifest and recovers from a crash:
//   - a file on disk that the manifest does not name was created by a crash
//     before its manifest entry: nothing points into it; it is removed;
//   - an obsolete file is removed (its removal was interrupted);
//   - an active file was being appended to: its tail may be torn and some
//     records may never have been referenced (the batch naming them never
//     committed), so it is scanned: its valid length is fixed where the
//     records stop parsing, its discard count is recomputed exactly from
//     the LSM, and it is sealed.
//
// openBlobSetReadOnly opens the blob files the manifest lists as live,
// read-only, and changes nothing on disk (Options.ReadOnly): an active
// file's unsynced tail is not truncated, obsolete files are not removed.
// Pointers into the synced part of every listed file read as usual.
func openBlobSetReadOnly(e *Engine) (*blobSet, error) {
	s := &blobSet{e: e, fs: e.opts.FS, dir: filepath.Join(e.dir, "blob"), realFS: IsOSFS(e.opts.FS)}
	s.mu.files = map[uint64]*blobFile{}
	s.mu.nextNum = 1
	s.pending = map[uint64]int{}
	s.retiring = map[uint64]*vlog.Writer{}
	names, err := s.fs.List(s.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("storage: list blob dir: %w", err)
	}
	onDisk := map[uint64]bool{}
	for _, n := range names {
		if num, ok := vlog.ParseFileName(n); ok {
			onDisk[num] = true
		}
	}
	metas, discards, err := s.loadManifest()
	if err != nil {
		return nil, err
	}
	for num, m := range metas {
		if !onDisk[num] || m.State == vlog.FileObsolete {
			continue
		}
		f, err := s.fs.Open(s.path(num))
		if err != nil {
			_ = s.close()
			return nil, fmt.Errorf("storage: open blob file: %w", err)
		}
		s.mu.files[num] = &blobFile{num: num, f: f, meta: m, discard: discards[num]}
		s.hasFiles.Store(true)
	}
	return s, nil
}

func openBlobSet(e *Engine) (*blobSet, error) {
	s := &blobSet{e: e, fs: e.opts.FS, dir: filepath.Join(e.dir, "blob"), realFS: IsOSFS(e.opts.FS)}
	s.mu.files = map[uint64]*blobFile{}
	s.mu.nextNum = 1
	s.pending = map[uint64]int{}
	s.retiring = map[uint64]*vlog.Writer{}
	if err := s.fs.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: create blob dir: %w", err)
	}
	if err := syncDir(s.fs, e.dir); err != nil {
		return nil, err
	}
	names, err := s.fs.List(s.dir)
	if err != nil {
		return nil, fmt.Errorf("storage: list blob dir: %w", err)
	}
	onDisk := map[uint64]bool{}
	for _, n := range names {
		if num, ok := vlog.ParseFileName(n); ok {
			onDisk[num] = true
			s.mu.nextNum = max(s.mu.nextNum, num+1)
		}
	}
	metas, discards, err := s.loadManifest()
	if err != nil {
		return nil, err
	}
	b := e.db.NewBatch()
	defer b.Close()
	var nums []uint64
	for num := range metas {
		nums = append(nums, num)
	}
	sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
	for _, num := range nums {
		m := metas[num]
		s.mu.nextNum = max(s.mu.nextNum, num+1)
		if !onDisk[num] {
			if m.State == vlog.FileSealed {
				return nil, fmt.Errorf("%w: blob file %s is in the manifest but missing", ErrCorruption, vlog.FileName(num))
			}
			_ = b.Delete(metaKey(num), nil)
			_ = b.Delete(discardKey(num), nil)
			continue
		}
		delete(onDisk, num)
		if m.State == vlog.FileObsolete {
			if err := s.fs.Remove(s.path(num)); err != nil {
				return nil, fmt.Errorf("storage: remove obsolete blob file: %w", err)
			}
			_ = b.Delete(metaKey(num), nil)
			_ = b.Delete(discardKey(num), nil)
			continue
		}
		f, err := s.fs.OpenReadWrite(s.path(num), vfs.WriteCategoryUnspecified)
		if err != nil {
			return nil, fmt.Errorf("storage: open blob file: %w", err)
		}
		bf := &blobFile{num: num, f: f, meta: m, discard: discards[num]}
		if m.State == vlog.FileActive {
			if err := s.recoverActive(bf); err != nil {
				_ = f.Close()
				return nil, err
			}
			_ = b.Set(metaKey(num), bf.meta.Encode(), nil)
			_ = b.Set(discardKey(num), encodeCounter(bf.discard), nil)
		}
		s.mu.files[num] = bf
	}
	for num := range onDisk { // orphans: never in the manifest
		if err := s.fs.Remove(s.path(num)); err != nil {
			return nil, fmt.Errorf("storage: remove orphan blob file: %w", err)
		}
	}
	if err := b.Commit(e.writeOpts(true)); err != nil {
		return nil, fmt.Errorf("storage: commit blob recovery: %w", err)
	}
	s.hasFiles.Store(len(s.mu.files) > 0)
	return s, nil
}

func (s *blobSet) loadManifest() (map[uint64]vlog.FileMeta, map[uint64]int64, error) {
	metas := map[uint64]vlog.FileMeta{}
	discards := map[uint64]int64{}
	scan := func(prefix []byte, fn func(num uint64, v []byte) error) error {
		end := append(append([]byte(nil), prefix...), 0xff)
		it, err := s.e.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: end})
		if err != nil {
			return err
		}
		defer it.Close()
		for it.First(); it.Valid(); it.Next() {
			k := it.Key()[len(prefix):]
			if len(k) != 8 {
				return fmt.Errorf("%w: bad blob manifest key %q", ErrCorruption, it.Key())
			}
			v, err := it.ValueAndErr()
			if err != nil {
				return err
			}
			if err := fn(binary.BigEndian.Uint64(k), v); err != nil {
				return err
			}
		}
		return it.Error()
	}
	if err := scan(metaPrefix, func(num uint64, v []byte) error {
		m, err := vlog.DecodeFileMeta(v)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCorruption, err)
		}
		metas[num] = m
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("storage: load blob manifest: %w", err)
	}
	if err := scan(discardPrefix, func(num uint64, v []byte) error {
		n, err := decodeCounter(v)
		discards[num] = n
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("storage: load discard counters: %w", err)
	}
	return metas, discards, nil
}

// recoverActive scans an active file after a crash and seals it; see
// openBlobSet.
func (s *blobSet) recoverActive(bf *blobFile) error {
	st, err := bf.f.Stat()
	if err != nil {
		return fmt.Errorf("storage: stat blob file: %w", err)
	}
	it := vlog.NewIterator(bf.f, st.Size())
	var records, dead int64
	var offsets []int64
	for it.Next() {
		en := it.Entry()
		n := en.Header.RecordBytes()
		records += n
		offsets = append(offsets, en.Offset)
		live, err := s.e.isLive(en.Key, bf.num, en.Offset)
		if err != nil {
			return err
		}
		if !live {
			dead += n
		}
	}
	// A parse error ends the valid part: the records after it were never
	// synced, hence never referenced (contract 1 of package vlog). The
	// bytes stay, unindexed, as garbage until the file is collected.
	size, err := vlog.WriteIndexAt(bf.f, st.Size(), offsets)
	if err != nil {
		return err
	}
	if err := bf.f.Sync(); err != nil {
		return fmt.Errorf("storage: sync recovered blob file: %w", err)
	}
	bf.meta = vlog.FileMeta{State: vlog.FileSealed, SizeBytes: size, RecordBytes: records}
	bf.discard = dead
	return nil
}

// isLive reports whether the LSM's current value of key is a pointer to the
// record at (file, offset).
func (e *Engine) isLive(key []byte, file uint64, offset int64) (bool, error) {
	if !isDataKey(key) {
		return false, nil // a punched key, or not a data key: never pointed to
	}
	stored, closer, err := e.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer closer.Close()
	p, isPtr, err := decodeStoredPointer(stored)
	if err != nil {
		return false, err
	}
	return isPtr && p.File == file && p.Offset == offset, nil
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("storage: open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("storage: sync dir %s: %w", dir, err)
	}
	return nil
}

// createFile creates a new blob file, makes its directory entry durable and
// records it in the manifest as active, in that order: a crash leaves at
// worst an orphan file (removed at open) but never a pointer into a file
// the manifest does not know.
func (s *blobSet) createFile() (*vlog.Writer, error) {
	s.mu.Lock()
	num := s.mu.nextNum
	s.mu.nextNum++
	s.mu.Unlock()
	wf, err := s.fs.Create(s.path(num), vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("storage: create blob file: %w", err)
	}
	rf, err := s.fs.OpenReadWrite(s.path(num), vfs.WriteCategoryUnspecified)
	if err != nil {
		_ = wf.Close()
		return nil, fmt.Errorf("storage: open blob file: %w", err)
	}
	if err := syncDir(s.fs, s.dir); err != nil {
		_ = wf.Close()
		_ = rf.Close()
		return nil, err
	}
	meta := vlog.FileMeta{State: vlog.FileActive}
	if err := s.e.db.Set(metaKey(num), meta.Encode(), s.e.writeOpts(true)); err != nil {
		_ = wf.Close()
		_ = rf.Close()
		return nil, fmt.Errorf("storage: record blob file: %w", err)
	}
	s.mu.Lock()
	s.mu.files[num] = &blobFile{num: num, f: rf, meta: meta}
	s.mu.Unlock()
	s.hasFiles.Store(true)
	w := vlog.NewWriter(wf, num)
	w.Placement = s.e.opts.BlobPlacement
	return w, nil
}

// seal syncs and closes w and records the file as sealed with its sizes.
func (s *blobSet) seal(w *vlog.Writer) error {
	if err := w.Close(); err != nil {
		return err
	}
	s.mu.Lock()
	bf := s.mu.files[w.Num()]
	bf.meta.State = vlog.FileSealed
	bf.meta.SizeBytes = w.Size()
	bf.meta.RecordBytes = w.RecordBytes
	enc := bf.meta.Encode()
	s.mu.Unlock()
	if err := s.e.db.Set(metaKey(w.Num()), enc, s.e.writeOpts(true)); err != nil {
		return fmt.Errorf("storage: seal blob file: %w", err)
	}
	return nil
}

// appendValues appends the values of ops marked sep to the foreground
// writer, syncs it (unless NoSync) and fills in the pointers. The caller
// commits the pointers only after this returns, and then calls
// releaseFile(num) whether or not the commit succeeded.
func (s *blobSet) appendValues(ops []batchOp) (num uint64, err error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	// Rotate only between batches, so that one batch's records are in one
	// file and the file it leaves is sealed only once it has committed.
	if s.w != nil && s.w.Size() >= s.e.opts.BlobFileTargetBytes {
		old := s.w
		s.w = nil
		if s.pending[old.Num()] == 0 {
			if err := s.seal(old); err != nil {
				return 0, err
			}
		} else {
			s.retiring[old.Num()] = old
		}
	}
	if s.w == nil {
		if s.w, err = s.createFile(); err != nil {
			return 0, err
		}
	}
	num = s.w.Num()
	s.pending[num]++
	for i := range ops {
		o := &ops[i]
		if !o.sep {
			continue
		}
		before, pad := s.w.WrittenBytes, s.w.PaddingBytes
		p, err := s.w.Append(o.key, o.value[1:])
		if err != nil {
			return num, err
		}
		s.foregroundBytes.Add(s.w.WrittenBytes - before)
		s.paddingBytes.Add(s.w.PaddingBytes - pad)
		o.ptr = p
	}
	// The manifest entry of an active file is not updated per append (that
	// would be an LSM write per batch); recovery recomputes it.
	s.mu.Lock()
	bf := s.mu.files[num]
	bf.meta.SizeBytes, bf.meta.RecordBytes = s.w.Size(), s.w.RecordBytes
	s.mu.Unlock()
	if s.e.opts.NoSync {
		return num, nil
	}
	return num, s.w.Sync()
}

// releaseFile ends a batch's claim on file num taken by appendValues, and
// seals the file if it was rotated out and this was the last claim.
func (s *blobSet) releaseFile(num uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.pending[num]--
	if s.pending[num] < 0 {
		panic(fmt.Sprintf("storage: blob file %d released more often than claimed", num))
	}
	if s.pending[num] > 0 {
		return nil
	}
	delete(s.pending, num)
	if w := s.retiring[num]; w != nil {
		delete(s.retiring, num)
		return s.seal(w)
	}
	return nil
}

// read returns the value of the record p names, verified to be key's.
func (s *blobSet) read(p vlog.Pointer, key, buf []byte) ([]byte, error) {
	s.mu.Lock()
	bf := s.mu.files[p.File]
	s.mu.Unlock()
	if bf == nil {
		return nil, fmt.Errorf("%w: pointer %s names no blob file", ErrCorruption, p)
	}
	v, err := vlog.ReadValue(bf.f, p, key, buf)
	if errors.Is(err, vlog.ErrCorruption) {
		// Name the file and offset: the operator's first question.
		return nil, fmt.Errorf("%w: blob file %s, offset %d: %w", ErrCorruption, s.path(p.File), p.Offset, err)
	}
	return v, err
}

// addDiscard adds committed discard deltas to the in-memory mirror, and
// the offsets of the records that died to their files' newlyDead.
func (s *blobSet) addDiscard(d map[uint64]int64, dead []vlog.Pointer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for num, n := range d {
		if bf := s.mu.files[num]; bf != nil {
			bf.discard += n
		}
	}
	if s.e.opts.Mode != ModePunch {
		return // only punching uses the reports
	}
	for _, p := range dead {
		if bf := s.mu.files[p.File]; bf != nil && len(bf.newlyDead) < newlyDeadMax {
			bf.newlyDead = append(bf.newlyDead, p.Offset)
		} else if bf != nil {
			// Too many unprocessed: forget them and walk the file next time.
			bf.newlyDead = nil
			bf.deadOverflow = true
		}
	}
}

// newlyDeadMax bounds the unprocessed death reports kept per file.
const newlyDeadMax = 1 << 16

// allocatedLocked returns the bytes bf occupies on disk.
func (s *blobSet) allocatedLocked(bf *blobFile) int64 {
	if s.realFS {
		if n, err := vlog.AllocatedBytes(s.path(bf.num)); err == nil {
			return n
		}
	}
	return max(0, bf.meta.SizeBytes-bf.punchedBytes)
}

// sealedStats returns the picker's view of the sealed files.
func (s *blobSet) sealedStats() []vlog.FileStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []vlog.FileStats
	for _, bf := range s.mu.files {
		if bf.meta.State != vlog.FileSealed {
			continue
		}
		out = append(out, vlog.FileStats{
			Num: bf.num, SizeBytes: bf.meta.SizeBytes, RecordBytes: bf.meta.RecordBytes,
			DiscardBytes: bf.discard, PunchedDiscardBytes: bf.meta.PunchedDiscardBytes,
			AllocatedBytes: s.allocatedLocked(bf),
		})
	}
	return out
}

// BlobStats returns the value log's counters.
func (e *Engine) BlobStats() BlobStats {
	s := e.blobs
	st := BlobStats{
		ForegroundWrittenBytes: s.foregroundBytes.Load(), PaddingBytes: s.paddingBytes.Load(),
		GCRewrittenBytes: s.gcRewrittenBytes.Load(), GCPunchedBytes: s.gcPunchedBytes.Load(),
		GCRewriteJobs: s.gcRewriteJobs.Load(), GCPunchJobs: s.gcPunchJobs.Load(),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, bf := range s.mu.files {
		st.Files++
		size := bf.meta.SizeBytes
		if fi, err := bf.f.Stat(); err == nil {
			size = fi.Size()
		}
		st.SizeBytes += size
		if s.realFS {
			n, _ := vlog.AllocatedBytes(s.path(bf.num))
			st.AllocatedBytes += n
		} else {
			st.AllocatedBytes += max(0, size-bf.punchedBytes)
		}
		st.RecordBytes += bf.meta.RecordBytes
		st.DiscardBytes += bf.discard
	}
	return st
}

// DiscardBytes returns the in-memory discard count of every blob file, for
// tests that check it against the persisted counters and the LSM.
func (e *Engine) DiscardBytes() map[uint64]int64 {
	s := e.blobs
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[uint64]int64{}
	for num, bf := range s.mu.files {
		out[num] = bf.discard
	}
	return out
}

func (s *blobSet) close() error {
	s.wmu.Lock()
	var err error
	for _, w := range s.retiring {
		if serr := s.seal(w); err == nil {
			err = serr
		}
	}
	s.retiring = nil
	if s.w != nil {
		if serr := s.seal(s.w); err == nil {
			err = serr
		}
		s.w = nil
	}
	s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, bf := range s.mu.files {
		if cerr := bf.f.Close(); err == nil {
			err = cerr
		}
	}
	s.mu.files = nil
	return err
}
