package storage

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// ErrNotFound is returned by Get when the key has no value.
var ErrNotFound = errors.New("storage: key not found")

// ErrCorruption marks data read back from disk that fails a check. It is
// never retried: the store must be repaired or rebuilt from replicas.
// Errors from blob files wrap both ErrCorruption and vlog.ErrCorruption.
var ErrCorruption = errors.New("storage: corruption")

// Reader is implemented by Engine, Batch and Snapshot.
type Reader interface {
	// Get returns a copy of the value of key, or ErrNotFound.
	Get(key []byte) ([]byte, error)
	// NewIter returns an iterator over [lower, upper).
	NewIter(lower, upper []byte) (*Iter, error)
}

// Writer collects writes.
type Writer interface {
	Set(key, value []byte) error
	Delete(key []byte) error
	DeleteRange(start, end []byte) error
}

// ReadWriter reads its own writes.
type ReadWriter interface {
	Reader
	Writer
}

// Engine is one Pebble instance plus, where the mode separates values, the
// blob files of its value log.
type Engine struct {
	db   *pebble.DB
	opts Options
	dir  string
	// blobs is never nil: even a store in ModeInline follows pointers
	// written while it ran in another mode.
	blobs *blobSet
	// stripes serialise, per key, the read of a data key's current value
	// and the commit that replaces it, so that discard accounting is exact
	// and a GC pointer update never overwrites a newer write. Lock order:
	// ascending stripe index; a batch with a range deletion takes all.
	stripes [stripeCount]sync.Mutex
	// readers tracks open readers so that GC never punches or deletes bytes
	// that a reader opened earlier may still follow a pointer into.
	readers readerGate
	gc      gcLoop
	// corrupt records the first file Pebble reported corrupt (events.go).
	corrupt *corruptionRecorder
	// metrics is the engine's Prometheus collector (metrics.go).
	metrics *collector
	// onCorruption, if set, is told of every data value that failed its
	// check when read (SetCorruptionHandler).
	onCorruption atomic.Pointer[func(key []byte, err error)]
}

// SetCorruptionHandler makes the engine call h, from the reading
// goroutine, each time a read finds a data value damaged (a blob record
// that fails its checks): key is the physical data key, err the read's
// error (wrapping ErrCorruption, naming the file and offset). The read
// still fails with err. h must not block or read the engine: it is
// called inside reads. nil removes the handler.
func (e *Engine) SetCorruptionHandler(h func(key []byte, err error)) {
	if h == nil {
		e.onCorruption.Store(nil)
		return
	}
	e.onCorruption.Store(&h)
}

func (e *Engine) reportCorruption(key []byte, err error) {
	if h := e.onCorruption.Load(); h != nil {
		(*h)(append([]byte(nil), key...), err)
	}
}

// Open opens or creates the engine in dir.
func Open(dir string, opts Options) (*Engine, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.ReadOnly {
		opts.FS = readOnlyFS{opts.FS}
	}
	cache := pebble.NewCache(opts.CacheBytes)
	defer cache.Unref()
	corrupt := &corruptionRecorder{}
	popts := &pebble.Options{
		FS:           opts.FS,
		Cache:        cache,
		MemTableSize: opts.MemTableBytes,
		Logger:       newEngineLogger(opts.Fatal),
		Merger:       merger,
		// Corruption found by a read fails that read; it does not kill
		// the process (events.go).
		EventListener: &pebble.EventListener{DataCorruption: corrupt.record},
		ReadOnly:      opts.ReadOnly,
		Levels:        opts.levelOptions(),
	}
	popts.DisableAutomaticCompactions = opts.DisableAutomaticCompactions
	if opts.Mode == ModePebble {
		popts.FormatMajorVersion = pebble.FormatNewest
		threshold := opts.ThresholdBytes
		popts.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
			return pebble.ValueSeparationPolicy{
				Enabled:               true,
				MinimumSize:           threshold,
				MaxBlobReferenceDepth: 10,
				RewriteMinimumAge:     0,
				TargetGarbageRatio:    0.2,
			}
		}
	}
	db, err := pebble.Open(dir, popts)
	if err != nil {
		if pebble.IsCorruptionError(err) {
			err = fmt.Errorf("%w: %w", ErrCorruption, err)
		}
		if f := corrupt.file(); f != "" {
			err = fmt.Errorf("file %s: %w", f, err)
		}
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	e := &Engine{db: db, opts: opts, dir: dir, corrupt: corrupt}
	e.readers.init()
	open := openBlobSet
	if opts.ReadOnly {
		open = openBlobSetReadOnly
	}
	if e.blobs, err = open(e); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := e.registerMetrics(); err != nil {
		_ = e.blobs.close()
		_ = db.Close()
		return nil, err
	}
	if opts.Mode.separates() && !opts.GC.Disabled && !opts.ReadOnly {
		e.gc.start(e)
	}
	return e, nil
}

// Close closes the engine.
func (e *Engine) Close() error {
	e.unregisterMetrics()
	e.gc.stop()
	err := e.blobs.close()
	if cerr := e.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// DB exposes the Pebble instance for metrics and tests. Values under
// PrefixData read through it carry the engine's tag byte (see value.go).
func (e *Engine) DB() *pebble.DB { return e.db }

// Options returns the engine's options with defaults filled in.
func (e *Engine) Options() Options { return e.opts }

// Get implements Reader.
func (e *Engine) Get(key []byte) ([]byte, error) {
	if !isDataKey(key) {
		return getCopy(e.db.Get(key))
	}
	ep := e.readers.enter()
	defer e.readers.exit(ep)
	return e.getData(key, e.db.Get)
}

// NewIter implements Reader.
func (e *Engine) NewIter(lower, upper []byte) (*Iter, error) {
	ep := e.readers.enter()
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		e.readers.exit(ep)
		return nil, err
	}
	return &Iter{it: it, e: e, epoch: ep, registered: true}, nil
}

// NewBatch returns an indexed batch that reads its own writes.
func (e *Engine) NewBatch() *Batch {
	return &Batch{b: e.db.NewIndexedBatch(), e: e}
}

// NewWriteBatch returns a batch that cannot be read; it is cheaper.
func (e *Engine) NewWriteBatch() *Batch {
	return &Batch{b: e.db.NewBatch(), e: e}
}

// NewSnapshot returns a consistent point-in-time view. Close it when done:
// an open snapshot holds back blob GC (it may follow old pointers).
func (e *Engine) NewSnapshot() *Snapshot {
	ep := e.readers.enter()
	return &Snapshot{s: e.db.NewSnapshot(), e: e, epoch: ep}
}

// Sync makes all writes so far durable (flushes the WAL).
func (e *Engine) Sync() error {
	b := e.db.NewBatch()
	defer b.Close()
	return b.Commit(e.writeOpts(true))
}

func (e *Engine) writeOpts(sync bool) *pebble.WriteOptions {
	if sync && !e.opts.NoSync {
		return pebble.Sync
	}
	return pebble.NoSync
}

// Batch is an atomic group of writes.
//
// Values under PrefixData are stored tagged inline in the Pebble batch, so
// an indexed batch reads its own writes like the LSM's. Separation happens
// at Commit (separate.go): large values are appended to a blob file, synced,
// and the batch that is committed carries pointers instead. A batch closed
// without Commit thus leaves no garbage in blob files.
type Batch struct {
	b *pebble.Batch
	e *Engine
	// dataWrites: the batch writes under PrefixData; Commit must look at it.
	dataWrites bool
	// rangeDel: the batch deletes a range that overlaps PrefixData.
	rangeDel bool
}

// Set implements Writer.
func (b *Batch) Set(key, value []byte) error {
	if !isDataKey(key) {
		return b.b.Set(key, value, nil)
	}
	b.dataWrites = true
	op := b.b.SetDeferred(len(key), 1+len(value))
	copy(op.Key, key)
	op.Value[0] = tagInline
	copy(op.Value[1:], value)
	return op.Finish()
}

// Delete implements Writer.
func (b *Batch) Delete(key []byte) error {
	if isDataKey(key) {
		b.dataWrites = true
	}
	return b.b.Delete(key, nil)
}

// DeleteRange implements Writer.
func (b *Batch) DeleteRange(start, end []byte) error {
	if overlapsData(start, end) {
		b.dataWrites, b.rangeDel = true, true
	}
	return b.b.DeleteRange(start, end, nil)
}

// Get implements Reader (indexed batches only).
func (b *Batch) Get(key []byte) ([]byte, error) {
	if !isDataKey(key) {
		return getCopy(b.b.Get(key))
	}
	ep := b.e.readers.enter()
	defer b.e.readers.exit(ep)
	return b.e.getData(key, b.b.Get)
}

// NewIter implements Reader (indexed batches only).
func (b *Batch) NewIter(lower, upper []byte) (*Iter, error) {
	ep := b.e.readers.enter()
	it, err := b.b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		b.e.readers.exit(ep)
		return nil, err
	}
	return &Iter{it: it, e: b.e, epoch: ep, registered: true}, nil
}

// Empty reports whether the batch holds no writes.
func (b *Batch) Empty() bool { return b.b.Empty() }

// Len returns the encoded size of the batch in bytes.
func (b *Batch) Len() int { return b.b.Len() }

// Commit applies the batch; sync=true waits until it is durable.
func (b *Batch) Commit(sync bool) error {
	if !b.dataWrites || !b.e.needsAccounting() {
		return b.b.Commit(b.e.writeOpts(sync))
	}
	return b.e.commitSeparated(b, sync)
}

// Repr returns the batch's encoded operations, for ApplyRepr on another
// engine (a leaseholder's evaluated writes, replicated through Raft). Values
// are in their inline form: separation happens where the batch is committed.
// The slice is valid until the batch changes or is closed.
func (b *Batch) Repr() []byte { return b.b.Repr() }

// ApplyRepr appends the operations encoded in repr (from Repr) to b. A repr
// that does not decode, or holds an operation kind that Repr never produces,
// is ErrCorruption and leaves b unchanged.
func (b *Batch) ApplyRepr(repr []byte) error {
	src := b.e.db.NewBatch()
	defer src.Close()
	if err := src.SetRepr(append([]byte(nil), repr...)); err != nil {
		return fmt.Errorf("storage: batch representation: %v: %w", err, ErrCorruption)
	}
	dataWrites, rangeDel := false, false
	r := src.Reader()
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			return fmt.Errorf("storage: batch representation: %v: %w", err, ErrCorruption)
		}
		if !ok {
			break
		}
		switch kind {
		case pebble.InternalKeyKindSet, pebble.InternalKeyKindDelete, pebble.InternalKeyKindDeleteSized:
			if isDataKey(k) {
				dataWrites = true
				if kind == pebble.InternalKeyKindSet && (len(v) == 0 || v[0] != tagInline) {
					return fmt.Errorf("storage: batch representation: data value of %q not inline: %w", k, ErrCorruption)
				}
			}
		case pebble.InternalKeyKindRangeDelete:
			if overlapsData(k, v) {
				dataWrites, rangeDel = true, true
			}
		default:
			return fmt.Errorf("storage: batch representation: operation kind %v: %w", kind, ErrCorruption)
		}
	}
	if err := b.b.Apply(src, nil); err != nil {
		return fmt.Errorf("storage: apply batch representation: %w", err)
	}
	b.dataWrites = b.dataWrites || dataWrites
	b.rangeDel = b.rangeDel || rangeDel
	return nil
}

// Close releases the batch. It is safe after Commit.
func (b *Batch) Close() { _ = b.b.Close() }

// Snapshot is a point-in-time view of the engine.
type Snapshot struct {
	s     *pebble.Snapshot
	e     *Engine
	epoch uint64
	once  sync.Once
}

// Get implements Reader.
func (s *Snapshot) Get(key []byte) ([]byte, error) {
	if !isDataKey(key) {
		return getCopy(s.s.Get(key))
	}
	return s.e.getData(key, s.s.Get)
}

// NewIter implements Reader.
func (s *Snapshot) NewIter(lower, upper []byte) (*Iter, error) {
	it, err := s.s.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	// The snapshot's registration covers its iterators.
	return &Iter{it: it, e: s.e}, nil
}

// Close releases the snapshot.
func (s *Snapshot) Close() {
	s.once.Do(func() {
		_ = s.s.Close()
		s.e.readers.exit(s.epoch)
	})
}

// Iter iterates keys in order. Key and Value return slices valid until the
// next positioning call; copy them to keep them.
type Iter struct {
	it         *pebble.Iterator
	e          *Engine
	epoch      uint64
	registered bool
	buf        []byte
}

func (i *Iter) First() bool            { return i.it.First() }
func (i *Iter) Last() bool             { return i.it.Last() }
func (i *Iter) SeekGE(key []byte) bool { return i.it.SeekGE(key) }
func (i *Iter) SeekLT(key []byte) bool { return i.it.SeekLT(key) }
func (i *Iter) Next() bool             { return i.it.Next() }
func (i *Iter) Prev() bool             { return i.it.Prev() }
func (i *Iter) Valid() bool            { return i.it.Valid() }
func (i *Iter) Key() []byte            { return i.it.Key() }
func (i *Iter) Error() error           { return i.it.Error() }

// Value returns the current value, following a blob pointer if need be.
func (i *Iter) Value() ([]byte, error) {
	v, err := i.it.ValueAndErr()
	if err != nil || !isDataKey(i.it.Key()) {
		return v, err
	}
	var out []byte
	out, i.buf, err = i.e.decodeStored(i.it.Key(), v, i.buf)
	return out, err
}

// Close releases the iterator.
func (i *Iter) Close() error {
	err := i.it.Close()
	if i.registered {
		i.registered = false
		i.e.readers.exit(i.epoch)
	}
	return err
}

func getCopy(v []byte, closer io.Closer, err error) ([]byte, error) {
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	out := append([]byte(nil), v...)
	_ = closer.Close()
	return out, nil
}

// DiskBytes is the store's size on disk: Pebble's files (tables, WAL,
// manifests) and the value log's allocated bytes, as the
// canopy_storage_disk_usage_bytes metric reports it.
func (e *Engine) DiskBytes() uint64 {
	return e.db.Metrics().DiskSpaceUsage() + uint64(max(0, e.BlobStats().AllocatedBytes))
}
