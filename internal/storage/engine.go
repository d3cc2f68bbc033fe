package storage

import (
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrNotFound is returned by Get when the key has no value.
var ErrNotFound = errors.New("storage: key not found")

// ErrCorruption marks data read back from disk that fails a check. It is
// never retried: the store must be repaired or rebuilt from replicas.
var ErrCorruption = errors.New("storage: corruption")

// Options configure an Engine. The zero value is the default.
type Options struct {
	// FS is the file system; nil means the real OS file system. Tests pass
	// vfs.NewStrictMem() to simulate crashes that lose unsynced writes.
	FS vfs.FS
	// CacheBytes is the block cache size; 0 means 64 MiB.
	CacheBytes int64
	// MemTableBytes is the memtable size; 0 means 16 MiB.
	MemTableBytes uint64
	// NoSync turns every sync into a no-sync write. Dangerous: it breaks
	// invariant I2 on power loss. Only for benchmarks that say so.
	NoSync bool
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 64 << 20
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = 16 << 20
	}
}

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

// Engine is one Pebble instance.
type Engine struct {
	db   *pebble.DB
	opts Options
}

// Open opens or creates the engine in dir.
func Open(dir string, opts Options) (*Engine, error) {
	opts.EnsureDefaults()
	cache := pebble.NewCache(opts.CacheBytes)
	defer cache.Unref()
	popts := &pebble.Options{
		FS:           opts.FS,
		Cache:        cache,
		MemTableSize: opts.MemTableBytes,
		Logger:       quietLogger{},
	}
	db, err := pebble.Open(dir, popts)
	if err != nil {
		return nil, fmt.Errorf("storage: open %s: %w", dir, err)
	}
	return &Engine{db: db, opts: opts}, nil
}

// Close closes the engine.
func (e *Engine) Close() error { return e.db.Close() }

// DB exposes the Pebble instance for metrics and tests.
func (e *Engine) DB() *pebble.DB { return e.db }

// Get implements Reader.
func (e *Engine) Get(key []byte) ([]byte, error) { return getCopy(e.db.Get(key)) }

// NewIter implements Reader.
func (e *Engine) NewIter(lower, upper []byte) (*Iter, error) {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	return &Iter{it: it}, nil
}

// NewBatch returns an indexed batch that reads its own writes.
func (e *Engine) NewBatch() *Batch {
	return &Batch{b: e.db.NewIndexedBatch(), e: e}
}

// NewWriteBatch returns a batch that cannot be read; it is cheaper.
func (e *Engine) NewWriteBatch() *Batch {
	return &Batch{b: e.db.NewBatch(), e: e}
}

// NewSnapshot returns a consistent point-in-time view. Close it when done.
func (e *Engine) NewSnapshot() *Snapshot { return &Snapshot{s: e.db.NewSnapshot()} }

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
type Batch struct {
	b *pebble.Batch
	e *Engine
}

// Set implements Writer.
func (b *Batch) Set(key, value []byte) error { return b.b.Set(key, value, nil) }

// Delete implements Writer.
func (b *Batch) Delete(key []byte) error { return b.b.Delete(key, nil) }

// DeleteRange implements Writer.
func (b *Batch) DeleteRange(start, end []byte) error { return b.b.DeleteRange(start, end, nil) }

// Get implements Reader (indexed batches only).
func (b *Batch) Get(key []byte) ([]byte, error) { return getCopy(b.b.Get(key)) }

// NewIter implements Reader (indexed batches only).
func (b *Batch) NewIter(lower, upper []byte) (*Iter, error) {
	it, err := b.b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	return &Iter{it: it}, nil
}

// Empty reports whether the batch holds no writes.
func (b *Batch) Empty() bool { return b.b.Empty() }

// Len returns the encoded size of the batch in bytes.
func (b *Batch) Len() int { return b.b.Len() }

// Commit applies the batch; sync=true waits until it is durable.
func (b *Batch) Commit(sync bool) error { return b.b.Commit(b.e.writeOpts(sync)) }

// Close releases the batch. It is safe after Commit.
func (b *Batch) Close() { _ = b.b.Close() }

// Snapshot is a point-in-time view of the engine.
type Snapshot struct{ s *pebble.Snapshot }

// Get implements Reader.
func (s *Snapshot) Get(key []byte) ([]byte, error) { return getCopy(s.s.Get(key)) }

// NewIter implements Reader.
func (s *Snapshot) NewIter(lower, upper []byte) (*Iter, error) {
	it, err := s.s.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, err
	}
	return &Iter{it: it}, nil
}

// Close releases the snapshot.
func (s *Snapshot) Close() { _ = s.s.Close() }

// Iter iterates keys in order. Key and Value return slices valid until the
// next positioning call; copy them to keep them.
type Iter struct{ it *pebble.Iterator }

func (i *Iter) First() bool            { return i.it.First() }
func (i *Iter) Last() bool             { return i.it.Last() }
func (i *Iter) SeekGE(key []byte) bool { return i.it.SeekGE(key) }
func (i *Iter) SeekLT(key []byte) bool { return i.it.SeekLT(key) }
func (i *Iter) Next() bool             { return i.it.Next() }
func (i *Iter) Prev() bool             { return i.it.Prev() }
func (i *Iter) Valid() bool            { return i.it.Valid() }
func (i *Iter) Key() []byte            { return i.it.Key() }
func (i *Iter) Value() ([]byte, error) { return i.it.ValueAndErr() }
func (i *Iter) Error() error           { return i.it.Error() }
func (i *Iter) Close() error           { return i.it.Close() }

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

type quietLogger struct{}

func (quietLogger) Infof(string, ...interface{}) {}
func (quietLogger) Errorf(format string, args ...interface{}) {
	fmt.Printf("pebble: "+format+"\n", args...)
}
func (quietLogger) Fatalf(format string, args ...interface{}) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
