package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/canopy-db/canopy/internal/vlog"
	"github.com/cockroachdb/pebble/v2"
)

// GC of blob files. One job runs at a time (Engine.gcMu... see gcLoop.mu).
//
// Rewrite (ModeRewrite, and stage two of ModePunch, "merge"):
//
//  1. Create an output file (active in the manifest).
//  2. Walk each input file; for each record whose key's LSM value still
//     points to it, copy it to the output.
//  3. Every moveChunkRecords records: sync the output, then, under the
//     stripe locks of the keys, check-and-set each pointer: if the LSM
//     still holds the old pointer, set the new one and count the old record
//     as discarded in its input file; otherwise a newer write won, and the
//     copy is counted as discarded in the output. Pointers and counts go in
//     one batch, so at every crash point the counts are exact.
//  4. One batch seals the outputs and marks the inputs obsolete; an
//     obsolete file is deleted once every reader that could hold a pointer
//     into it has closed.
//
// Punch (stage one of ModePunch):
//
//  1. Find the dead records: the first punch of a file in this process
//     walks it (headers and keys) and asks the LSM which records are live;
//     later punches take the records the write path reported dead since.
//  2. Fence the reader gate and wait, bounded, for older readers to close.
//  3. Punch every block-aligned span holding no live byte, skipping blocks
//     punched before. No LSM write: pointers stay valid, as live records do
//     not move. A punch lost in a crash only leaves dead bytes allocated.

// testingHook, when set by a test, is called at each named step of GC and
// of the separated commit path, so that a test can simulate a crash there.
var testingHook func(point string)

func hook(point string) {
	if testingHook != nil {
		testingHook(point)
	}
}

// moveChunkRecords bounds the pointers updated in one batch by a rewrite.
const moveChunkRecords = 256

type gcLoop struct {
	// mu serialises GC rounds (background and RunGC).
	mu     sync.Mutex
	stopCh chan struct{}
	kickCh chan struct{}
	wg     sync.WaitGroup
}

func (g *gcLoop) start(e *Engine) {
	g.stopCh = make(chan struct{})
	g.kickCh = make(chan struct{}, 1)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		t := time.NewTicker(e.opts.GC.Interval)
		defer t.Stop()
		for {
			select {
			case <-g.stopCh:
				return
			case <-g.kickCh:
			case <-t.C:
			}
			if _, err := e.RunGC(); err != nil {
				slog.Error("storage: blob GC", "err", err)
			}
		}
	}()
}

func (g *gcLoop) kick() {
	if g.kickCh == nil {
		return
	}
	select {
	case g.kickCh <- struct{}{}:
	default:
	}
}

func (g *gcLoop) stop() {
	if g.stopCh == nil {
		return
	}
	close(g.stopCh)
	g.wg.Wait()
	g.stopCh = nil
}

// GCReport says what one GC round did.
type GCReport struct {
	Punched   []uint64 // files punched
	Rewritten []uint64 // files rewritten or merged (now obsolete)
	Deleted   []uint64 // obsolete files deleted
	// RewrittenBytes: bytes appended to outputs; PunchedBytes: bytes in
	// punched spans (not all newly freed: a span may be punched again).
	RewrittenBytes, PunchedBytes int64
}

// RunGC runs one round of blob GC for the store's mode and returns what it
// did. It is safe to call concurrently with reads and writes; rounds are
// serialised. Errors wrapping ErrCorruption mean a live record failed its
// checks.
func (e *Engine) RunGC() (GCReport, error) {
	e.gc.mu.Lock()
	defer e.gc.mu.Unlock()
	var rep GCReport
	rep.Deleted = e.blobs.deleteObsolete()
	g := e.opts.GC
	switch e.opts.Mode {
	case ModeRewrite:
		picks := vlog.PickRewrite(e.blobs.sealedStats(), g.RewriteRatioMin, g.InputBytesMax)
		if err := e.rewrite(picks, &rep); err != nil {
			return rep, err
		}
	case ModePunch:
		for _, num := range vlog.PickPunch(e.blobs.sealedStats(), g.PunchBytesMin, g.PunchFilesMax) {
			if err := e.punch(num, &rep); err != nil {
				return rep, err
			}
		}
		picks := vlog.PickMerge(e.blobs.sealedStats(), g.MergeBelowBytes, g.InputBytesMax)
		if err := e.rewrite(picks, &rep); err != nil {
			return rep, err
		}
	}
	hook("gc:before-delete")
	rep.Deleted = append(rep.Deleted, e.blobs.deleteObsolete()...)
	return rep, nil
}

func (s *blobSet) file(num uint64) *blobFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.files[num]
}

// punch is stage one for one file; see the comment at the top.
//
// The dead spans come from one of two sources. The first punch of a file
// in this process walks it (headers and keys) and asks the LSM which
// records are live. Later punches need no walk: the write path reports the
// offset of every record it kills (newlyDead), and each newly dead record
// is widened to the run of dead records around it, bounded by its live
// neighbours. Rejected: walking every time. Each walk reads every live
// record's key from the LSM, so its cost grows with the live data, while
// the work to do grows only with what died since.
func (e *Engine) punch(num uint64, rep *GCReport) error {
	s := e.blobs
	bf := s.file(num)
	s.mu.Lock()
	if bf == nil || bf.meta.State != vlog.FileSealed {
		s.mu.Unlock()
		return nil
	}
	size, discardBefore := bf.meta.SizeBytes, bf.discard
	newly := bf.newlyDead
	bf.newlyDead = nil
	walk := !bf.deadComplete || bf.deadOverflow
	bf.deadOverflow = false
	s.mu.Unlock()
	var spans []vlog.Span
	var err error
	if walk {
		spans, err = e.punchSpansByWalk(bf, size)
	} else {
		spans, err = e.punchSpansByReports(bf, newly)
	}
	if err != nil {
		return fmt.Errorf("storage: punch %s: %w", vlog.FileName(num), err)
	}
	if !e.waitReaders(e.readers.fence()) {
		// An old reader is still open; try again next round.
		if !walk {
			s.mu.Lock()
			bf.newlyDead = append(bf.newlyDead, newly...)
			s.mu.Unlock()
		}
		return nil
	}
	var before int64
	if s.realFS {
		before, _ = vlog.AllocatedBytes(s.path(num))
	}
	// Skip blocks punched before (see blobFile.punched); GC rounds are
	// serialised, so only this goroutine touches bf.punched.
	var todo []vlog.Span
	for _, sp := range spans {
		for off := sp.Offset; off < sp.End(); {
			blk := off / vlog.BlockBytes
			end := min(sp.End(), (blk+1)*vlog.BlockBytes)
			if bf.punched.has(blk) {
				off = end
				continue
			}
			if n := len(todo); n > 0 && todo[n-1].End() == off {
				todo[n-1].Bytes += end - off
			} else {
				todo = append(todo, vlog.Span{Offset: off, Bytes: end - off})
			}
			off = end
		}
	}
	var punched int64
	for _, sp := range todo {
		hook("punch:span")
		if err := vlog.PunchHole(bf.f, sp.Offset, sp.Bytes); err != nil {
			return err
		}
		for blk := sp.Offset / vlog.BlockBytes; blk*vlog.BlockBytes < sp.End(); blk++ {
			bf.punched.add(blk)
		}
		punched += sp.Bytes
	}
	freed := punched
	if s.realFS {
		after, _ := vlog.AllocatedBytes(s.path(num))
		freed = before - after
	}
	s.mu.Lock()
	bf.meta.PunchedDiscardBytes = discardBefore
	bf.punchedBytes += punched
	s.mu.Unlock()
	s.gcPunchedBytes.Add(freed)
	s.gcPunchJobs.Add(1)
	rep.Punched = append(rep.Punched, num)
	rep.PunchedBytes += punched
	return nil
}

// punchSpansByWalk walks a sealed file, marks its dead records, loads its
// index and returns every block-aligned span holding no live byte.
func (e *Engine) punchSpansByWalk(bf *blobFile, size int64) ([]vlog.Span, error) {
	offsets, indexEnd, err := vlog.ReadIndex(bf.f, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruption, err)
	}
	var live []vlog.Span
	it, err := vlog.NewSealedIterator(bf.f, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruption, err)
	}
	// Records passed over (known dead, or with a punched header) are dead.
	it.Skip = func(ord int) bool { return bf.dead.has(int64(ord)) }
	next := 0
	for it.Next() {
		en := it.Entry()
		for ; next < en.Ordinal; next++ {
			bf.dead.add(int64(next))
		}
		next = en.Ordinal + 1
		ok, err := e.isLive(en.Key, bf.num, en.Offset)
		if err != nil {
			return nil, err
		}
		if ok {
			live = append(live, vlog.Span{Offset: en.Offset, Bytes: en.Header.RecordBytes()})
		} else {
			bf.dead.add(int64(en.Ordinal))
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruption, err)
	}
	for ; next < len(offsets); next++ {
		bf.dead.add(int64(next))
	}
	bf.index, bf.indexEnd, bf.deadComplete = offsets, indexEnd, true
	return vlog.HoleSpans(append(live, vlog.Span{Offset: indexEnd, Bytes: size - indexEnd}), size), nil
}

// punchSpansByReports marks the reported records dead and returns, for each,
// the block-aligned span of the run of dead records around it, bounded by
// the live neighbours (or the file's start and its index).
func (e *Engine) punchSpansByReports(bf *blobFile, newly []int64) ([]vlog.Span, error) {
	n := len(bf.index)
	var ords []int
	for _, off := range newly {
		i, ok := slices.BinarySearch(bf.index, off)
		if !ok {
			return nil, fmt.Errorf("%w: reported dead record at %d is not in the index", ErrCorruption, off)
		}
		bf.dead.add(int64(i))
		ords = append(ords, i)
	}
	slices.Sort(ords)
	var spans []vlog.Span
	covered := -1 // runs are found in order; skip ordinals inside the last
	for _, o := range ords {
		if o <= covered {
			continue
		}
		i, j := o, o
		for i > 0 && bf.dead.has(int64(i-1)) {
			i--
		}
		for j < n-1 && bf.dead.has(int64(j+1)) {
			j++
		}
		covered = j
		start := int64(0)
		if i > 0 {
			h, err := vlog.ReadHeader(bf.f, bf.index[i-1])
			if err != nil {
				// The left neighbour is live (not marked dead), so its
				// header must be intact.
				return nil, fmt.Errorf("%w: live neighbour: %w", ErrCorruption, err)
			}
			start = bf.index[i-1] + h.RecordBytes()
		}
		end := bf.indexEnd
		if j < n-1 {
			end = bf.index[j+1]
		}
		start += (vlog.BlockBytes - start%vlog.BlockBytes) % vlog.BlockBytes
		end -= end % vlog.BlockBytes
		if end > start {
			spans = append(spans, vlog.Span{Offset: start, Bytes: end - start})
		}
	}
	return spans, nil
}

// waitReaders waits, at most ReaderWaitMax, until readers up to ep closed.
func (e *Engine) waitReaders(ep uint64) bool {
	deadline := time.Now().Add(e.opts.GC.ReaderWaitMax)
	for !e.readers.drained(ep) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

type move struct {
	key      []byte
	old, new vlog.Pointer
}

// rewrite copies the live records of inputs into new files; see the comment
// at the top.
func (e *Engine) rewrite(inputs []uint64, rep *GCReport) error {
	if len(inputs) == 0 {
		return nil
	}
	s := e.blobs
	var outs []*vlog.Writer
	var out *vlog.Writer
	var moves []move
	var buf []byte
	flush := func() error {
		for _, w := range outs {
			if err := w.Sync(); err != nil {
				return err
			}
		}
		hook("rewrite:outputs-synced")
		err := e.casPointers(moves)
		moves = moves[:0]
		hook("rewrite:pointers-updated")
		return err
	}
	for _, num := range inputs {
		bf := s.file(num)
		s.mu.Lock()
		ok := bf != nil && bf.meta.State == vlog.FileSealed
		var size int64
		if ok {
			size = bf.meta.SizeBytes
		}
		s.mu.Unlock()
		if !ok {
			continue
		}
		it, err := vlog.NewSealedIterator(bf.f, size)
		if err != nil {
			return fmt.Errorf("storage: rewrite %s: %w: %w", vlog.FileName(num), ErrCorruption, err)
		}
		it.Skip = func(ord int) bool { return bf.dead.has(int64(ord)) }
		for it.Next() {
			en := it.Entry()
			live, err := e.isLive(en.Key, num, en.Offset)
			if err != nil {
				return err
			}
			if !live {
				continue
			}
			key, value, err := it.Value(buf[:0])
			if err != nil {
				return fmt.Errorf("storage: live record in %s: %w: %w", vlog.FileName(num), ErrCorruption, err)
			}
			if out == nil || out.Size() >= e.opts.BlobFileTargetBytes {
				if out, err = s.createFile(); err != nil {
					return err
				}
				outs = append(outs, out)
			}
			before := out.WrittenBytes
			p, err := out.Append(key, value)
			if err != nil {
				return err
			}
			s.gcRewrittenBytes.Add(out.WrittenBytes - before)
			rep.RewrittenBytes += out.WrittenBytes - before
			moves = append(moves, move{key: append([]byte(nil), key...), old: en.Pointer(num), new: p})
			if len(moves) >= moveChunkRecords {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("storage: rewrite %s: %w: %w", vlog.FileName(num), ErrCorruption, err)
		}
	}
	if err := flush(); err != nil {
		return err
	}
	// The invariant below is checked against the persisted counters: the
	// in-memory mirror of a writer's delta lags its commit (a writer adds
	// it after the batch is durable), and the walk above may have seen a
	// record dead in that window.
	persisted := map[uint64]int64{}
	for _, num := range inputs {
		n, err := e.persistedDiscard(num)
		if err != nil {
			return err
		}
		persisted[num] = n
	}
	// Seal the outputs and retire the inputs in one batch.
	b := e.db.NewBatch()
	defer b.Close()
	s.mu.Lock()
	for _, w := range outs {
		if err := w.Close(); err != nil {
			s.mu.Unlock()
			return err
		}
		bf := s.mu.files[w.Num()]
		bf.meta = vlog.FileMeta{State: vlog.FileSealed, SizeBytes: w.Size(), RecordBytes: w.RecordBytes}
		_ = b.Set(metaKey(w.Num()), bf.meta.Encode(), nil)
	}
	var retired []*blobFile
	for _, num := range inputs {
		bf := s.mu.files[num]
		if bf == nil || bf.meta.State != vlog.FileSealed {
			continue
		}
		// Invariant: every record of a retired file is dead and counted:
		// either a write killed it or casPointers moved it.
		if persisted[num] != bf.meta.RecordBytes {
			s.mu.Unlock()
			panic(fmt.Sprintf("storage: blob file %s retired with %d discarded of %d record bytes",
				vlog.FileName(num), persisted[num], bf.meta.RecordBytes))
		}
		m := bf.meta
		m.State = vlog.FileObsolete
		_ = b.Set(metaKey(num), m.Encode(), nil)
		retired = append(retired, bf)
	}
	s.mu.Unlock()
	if err := b.Commit(e.writeOpts(true)); err != nil {
		return fmt.Errorf("storage: retire blob files: %w", err)
	}
	hook("rewrite:retired")
	ep := e.readers.fence()
	s.mu.Lock()
	for _, bf := range retired {
		bf.meta.State = vlog.FileObsolete
		bf.obsoleteEpoch = ep
		rep.Rewritten = append(rep.Rewritten, bf.num)
	}
	s.mu.Unlock()
	s.gcRewriteJobs.Add(1)
	return nil
}

// persistedDiscard reads file num's discard counter from the engine.
func (e *Engine) persistedDiscard(num uint64) (int64, error) {
	v, closer, err := e.db.Get(discardKey(num))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	return decodeCounter(v)
}

// casPointers installs the moves whose keys still hold the old pointer.
func (e *Engine) casPointers(moves []move) error {
	if len(moves) == 0 {
		return nil
	}
	keys := make([][]byte, len(moves))
	for i, m := range moves {
		keys[i] = m.key
	}
	unlock := e.lockStripes(keys, false)
	defer unlock()
	b := e.db.NewBatch()
	defer b.Close()
	discard := map[uint64]int64{}
	var dead []vlog.Pointer
	var ptrBuf []byte
	for _, m := range moves {
		n := vlog.RecordBytes(len(m.key), int(m.old.ValueBytes))
		stored, closer, err := e.db.Get(m.key)
		still := false
		if err == nil {
			p, isPtr, derr := decodeStoredPointer(stored)
			_ = closer.Close()
			if derr != nil {
				return derr
			}
			still = isPtr && p == m.old
		} else if !errors.Is(err, pebble.ErrNotFound) {
			return err
		}
		if still {
			ptrBuf = m.new.Append(append(ptrBuf[:0], tagPointer))
			if err := b.Set(m.key, ptrBuf, nil); err != nil {
				return err
			}
			discard[m.old.File] += n
		} else {
			discard[m.new.File] += n
			dead = append(dead, m.new)
		}
	}
	for num, n := range discard {
		if err := b.Merge(discardKey(num), encodeCounter(n), nil); err != nil {
			return err
		}
	}
	if err := b.Commit(e.writeOpts(true)); err != nil {
		return fmt.Errorf("storage: update pointers: %w", err)
	}
	e.blobs.addDiscard(discard, dead)
	return nil
}

// deleteObsolete removes obsolete files that no reader can still use.
func (s *blobSet) deleteObsolete() []uint64 {
	s.mu.Lock()
	var gone []*blobFile
	for num, bf := range s.mu.files {
		if bf.meta.State == vlog.FileObsolete && s.e.readers.drained(bf.obsoleteEpoch) {
			gone = append(gone, bf)
			delete(s.mu.files, num)
		}
	}
	s.hasFiles.Store(len(s.mu.files) > 0)
	s.mu.Unlock()
	sort.Slice(gone, func(i, j int) bool { return gone[i].num < gone[j].num })
	var out []uint64
	b := s.e.db.NewBatch()
	defer b.Close()
	for _, bf := range gone {
		_ = bf.f.Close()
		if err := s.fs.Remove(s.path(bf.num)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			slog.Error("storage: remove blob file", "file", vlog.FileName(bf.num), "err", err)
			continue
		}
		_ = b.Delete(metaKey(bf.num), nil)
		_ = b.Delete(discardKey(bf.num), nil)
		out = append(out, bf.num)
	}
	if len(out) > 0 {
		// Not synced: a crash before this lands finds the file obsolete and
		// already removed, which recovery handles.
		_ = b.Commit(pebble.NoSync)
	}
	return out
}
