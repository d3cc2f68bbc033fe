package backup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/tso"
)

// Source is what Backup reads from: client.DB.
type Source interface {
	ScanAt(ctx context.Context, start, end []byte, ts uint64, limit int) ([]client.KeyValue, error)
}

// Options of Backup and Restore. The zero value takes the defaults.
type Options struct {
	// PageKeys is the most keys one ScanAt page reads (Backup; default
	// 1000, at most client.Options.ScanKeysMax).
	PageKeys int
	// FileBytesTarget: Backup starts a new data file once one reaches it
	// (default 64 MiB).
	FileBytesTarget int64
	// AttemptsMax bounds the attempts of one page (Backup) or one batch
	// (Restore) that fails with a retryable, unavailable or (Restore)
	// ambiguous error (default 10); waits between them back off from 50
	// ms to 2 s.
	AttemptsMax int
	// BatchKeys and BatchBytes bound one Restore transaction (defaults
	// 500 keys, 4 MiB of keys and values; a larger pair goes alone).
	BatchKeys  int
	BatchBytes int
	// Workers is the number of Restore transactions in flight (default
	// 4).
	Workers int
	// ClusterID and StatusEncoding are recorded in a backup's manifest.
	ClusterID, StatusEncoding string
	// Progress, if not nil, is called after each page or batch, and once
	// with Done at the end.
	Progress func(Progress)
}

// Progress reports how far a backup or restore has come.
type Progress struct {
	Keys, Bytes int64
	Files       int
	// LastKey is the last user key written (backup) or loaded in order
	// (restore: the last key of the last file read).
	LastKey []byte
	Done    bool
}

func (o *Options) ensureDefaults() {
	if o.PageKeys <= 0 {
		o.PageKeys = 1000
	}
	if o.FileBytesTarget <= 0 {
		o.FileBytesTarget = 64 << 20
	}
	if o.AttemptsMax <= 0 {
		o.AttemptsMax = 10
	}
	if o.BatchKeys <= 0 {
		o.BatchKeys = 500
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = 4 << 20
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
}

// retry runs f up to attempts times while retriable(err), backing off.
func retry(ctx context.Context, attempts int, retriable func(error) bool, f func() error) error {
	wait := 50 * time.Millisecond
	var err error
	for a := 0; a < attempts; a++ {
		if err = f(); err == nil || !retriable(err) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
	return fmt.Errorf("gave up after %d attempts: %w", attempts, err)
}

// Backup writes every user key's value as of at into dir, which must not
// exist or be empty, and returns the manifest. at must be an oracle
// timestamp already handed out (see the package contract). On error the
// directory holds no manifest, so no restore accepts it.
func Backup(ctx context.Context, src Source, dir string, at uint64, o Options) (*Manifest, error) {
	o.ensureDefaults()
	if at == 0 {
		return nil, fmt.Errorf("%w: backup needs a timestamp", client.ErrInvalidArgument)
	}
	if err := prepareDir(dir); err != nil {
		return nil, err
	}
	m := &Manifest{Format: FormatName, Version: FormatVersion, ClusterID: o.ClusterID, AtTs: at,
		AtTime: time.UnixMilli(int64(at >> tso.DefaultLogicalBits)).UTC().Format(time.RFC3339Nano), StatusEncoding: o.StatusEncoding}
	var cur *dataWriter
	closeCur := func() error {
		if cur == nil {
			return nil
		}
		fi, err := cur.finish()
		cur = nil
		if err != nil {
			return err
		}
		m.Files = append(m.Files, fi)
		return nil
	}
	defer func() {
		if cur != nil {
			_ = cur.f.Close()
		}
	}()
	report := func(last []byte, done bool) {
		if o.Progress != nil {
			files := len(m.Files)
			if cur != nil {
				files++
			}
			o.Progress(Progress{Keys: m.Keys, Bytes: m.Bytes, Files: files, LastKey: last, Done: done})
		}
	}
	var start, lastKey []byte
	for {
		var page []client.KeyValue
		err := retry(ctx, o.AttemptsMax, func(err error) bool {
			return errors.Is(err, client.ErrRetryable) || errors.Is(err, client.ErrUnavailable)
		}, func() error {
			var err error
			page, err = src.ScanAt(ctx, start, nil, at, o.PageKeys)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("reading at %d from %q: %w", at, start, err)
		}
		for _, kv := range page {
			if cur == nil {
				if len(m.Files) >= FilesMax {
					return nil, fmt.Errorf("%w: the backup needs more than FilesMax=%d data files; raise FileBytesTarget", client.ErrInvalidArgument, FilesMax)
				}
				if cur, err = createDataFile(dir, len(m.Files)+1); err != nil {
					return nil, err
				}
			}
			if err := cur.add(kv.Key, kv.Value); err != nil {
				return nil, err
			}
			m.Keys++
			m.Bytes += int64(len(kv.Key) + len(kv.Value))
			if cur.info.Size >= o.FileBytesTarget {
				if err := closeCur(); err != nil {
					return nil, err
				}
			}
		}
		if len(page) > 0 {
			last := page[len(page)-1].Key
			lastKey = last
			report(last, false)
			if len(last) > keys.KeyBytesMax {
				return nil, fmt.Errorf("%w: scan returned a key of %d bytes", client.ErrInternal, len(last))
			}
			start = append(append([]byte(nil), last...), 0)
		}
		if len(page) < o.PageKeys {
			break
		}
	}
	if err := closeCur(); err != nil {
		return nil, err
	}
	b, err := encodeManifest(m)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(dir, ManifestName, b); err != nil {
		return nil, err
	}
	report(lastKey, true)
	return m, nil
}

// prepareDir creates dir, or accepts it if it exists and is empty.
func prepareDir(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return os.MkdirAll(dir, 0o755)
	case err != nil:
		return err
	case len(ents) > 0:
		return fmt.Errorf("%w: %s holds %d entries (%s, ...); choose a new directory", ErrExists, dir, len(ents), ents[0].Name())
	}
	return nil
}

// writeFileAtomic writes name in dir by a temporary file, fsync, rename
// and fsync of the directory, so that name is either absent or whole.
func writeFileAtomic(dir, name string, b []byte) error {
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
