package storage

import (
	"errors"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FaultFS wraps a vfs.FS so that a nemesis can make its syncs stall or
// fail (kvserver's /debug/fault, `canopy start --enable-fault-injection`).
// With no fault set it only forwards. A failed sync is what a dying disk
// reports: Pebble cannot go on after it (Options.Fatal), so the node must
// stop; a stalled sync holds every write behind it until the stall ends.
type FaultFS struct {
	vfs.FS
	mu struct {
		sync.Mutex
		stallUntil time.Time
		stalled    chan struct{} // closed when the stall is cleared
		fail       bool
	}
}

// ErrInjectedSync is the error of a sync that FaultFS failed.
var ErrInjectedSync = errors.New("storage: injected fault: fsync failed")

// FaultStallMax bounds one injected stall.
const FaultStallMax = time.Minute

// NewFaultFS wraps fs (nil: the OS file system).
func NewFaultFS(fs vfs.FS) *FaultFS {
	if fs == nil {
		fs = vfs.Default
	}
	return &FaultFS{FS: fs}
}

// StallSyncs makes every sync wait until d has passed (at most
// FaultStallMax) or ClearFaults is called.
func (fs *FaultFS) StallSyncs(d time.Duration) {
	d = min(d, FaultStallMax)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.mu.stalled == nil {
		fs.mu.stalled = make(chan struct{})
	}
	fs.mu.stallUntil = time.Now().Add(d)
}

// FailSyncs makes every sync fail with ErrInjectedSync.
func (fs *FaultFS) FailSyncs() {
	fs.mu.Lock()
	fs.mu.fail = true
	fs.mu.Unlock()
}

// ClearFaults ends a stall and stops failing syncs.
func (fs *FaultFS) ClearFaults() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.mu.fail = false
	if fs.mu.stalled != nil {
		close(fs.mu.stalled)
		fs.mu.stalled = nil
	}
	fs.mu.stallUntil = time.Time{}
}

// Faults reports the faults in force.
func (fs *FaultFS) Faults() (stallLeft time.Duration, failing bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.mu.stalled != nil {
		stallLeft = max(0, time.Until(fs.mu.stallUntil))
	}
	return stallLeft, fs.mu.fail
}

// beforeSync applies the faults to one sync.
func (fs *FaultFS) beforeSync() error {
	fs.mu.Lock()
	fail, until, stalled := fs.mu.fail, fs.mu.stallUntil, fs.mu.stalled
	fs.mu.Unlock()
	if stalled != nil {
		if d := time.Until(until); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-stalled:
				t.Stop()
			}
		}
	}
	if fail {
		return ErrInjectedSync
	}
	return nil
}

// Unwrap returns the wrapped FS.
func (fs *FaultFS) Unwrap() vfs.FS { return fs.FS }

func (fs *FaultFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	return &faultFile{File: f, fs: fs}, nil
}

// Create implements vfs.FS.
func (fs *FaultFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.Create(name, c))
}

// Open implements vfs.FS (directories are opened to be synced).
func (fs *FaultFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.Open(name, opts...))
}

// OpenDir implements vfs.FS.
func (fs *FaultFS) OpenDir(name string) (vfs.File, error) { return fs.wrap(fs.FS.OpenDir(name)) }

// OpenReadWrite implements vfs.FS.
func (fs *FaultFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name, c, opts...))
}

// ReuseForWrite implements vfs.FS.
func (fs *FaultFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname, c))
}

type faultFile struct {
	vfs.File
	fs *FaultFS
}

func (f *faultFile) Sync() error {
	if err := f.fs.beforeSync(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *faultFile) SyncData() error {
	if err := f.fs.beforeSync(); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f *faultFile) SyncTo(length int64) (bool, error) {
	if err := f.fs.beforeSync(); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}

// IsOSFS reports whether fs is the OS file system, directly or under a
// FaultFS.
func IsOSFS(fs vfs.FS) bool {
	if f, ok := fs.(*FaultFS); ok {
		fs = f.FS
	}
	return fs == nil || fs == vfs.Default
}
