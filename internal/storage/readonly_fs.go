package storage

import (
	"fmt"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"
)

// ErrReadOnly is returned by every operation that would change a file of
// a store opened with Options.ReadOnly.
var ErrReadOnly = fmt.Errorf("storage: the store is opened read-only")

// readOnlyFS is the file system of an engine opened with Options.ReadOnly:
// every operation that creates, changes or removes a file fails with
// ErrReadOnly, so that nothing (Pebble's read-only mode included) can alter
// the store, and the directory lock is taken without touching the LOCK
// file. Pebble's own lock creates (truncates) LOCK, which changes its
// modification time even in read-only mode.
type readOnlyFS struct {
	vfs.FS
}

func (fs readOnlyFS) refuse(op, name string) error {
	return fmt.Errorf("%w: %s %s", ErrReadOnly, op, name)
}

func (fs readOnlyFS) Create(name string, _ vfs.DiskWriteCategory) (vfs.File, error) {
	return nil, fs.refuse("create", name)
}
func (fs readOnlyFS) Link(oldname, newname string) error { return fs.refuse("link", newname) }
func (fs readOnlyFS) OpenReadWrite(name string, _ vfs.DiskWriteCategory, _ ...vfs.OpenOption) (vfs.File, error) {
	return nil, fs.refuse("open for writing", name)
}
func (fs readOnlyFS) Remove(name string) error             { return fs.refuse("remove", name) }
func (fs readOnlyFS) RemoveAll(name string) error          { return fs.refuse("remove", name) }
func (fs readOnlyFS) Rename(oldname, newname string) error { return fs.refuse("rename", oldname) }
func (fs readOnlyFS) ReuseForWrite(oldname, newname string, _ vfs.DiskWriteCategory) (vfs.File, error) {
	return nil, fs.refuse("reuse", oldname)
}
func (fs readOnlyFS) MkdirAll(dir string, _ os.FileMode) error {
	return fs.refuse("create directory", dir)
}
func (fs readOnlyFS) Unwrap() vfs.FS { return fs.FS }

// Lock takes a shared (read) lock on the existing file name, opened
// read-only: it conflicts with a running node's exclusive lock (so a store
// in use is refused) but not with another read-only open. On a file system
// other than the operating system's it defers to that file system's lock.
func (fs readOnlyFS) Lock(name string) (io.Closer, error) {
	if fs.FS != vfs.Default {
		return fs.FS.Lock(name)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	spec := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_SETLK, &spec); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	return f, nil
}
