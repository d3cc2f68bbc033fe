package backup

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/canopy-db/canopy/client"
)

// Restore loads the backup in dir into the cluster of db, which must hold
// no user key. It checks the whole backup first (Verify), so a damaged one
// is refused (ErrDamaged) with the cluster untouched, then writes the keys
// in key order, in transactions of up to Options.BatchKeys keys and
// BatchBytes bytes, Options.Workers at a time. A batch whose outcome is
// ambiguous is written again: it writes the same values, so a second
// application changes nothing but a version's timestamp.
func Restore(ctx context.Context, db *client.DB, dir string, o Options) (*Manifest, error) {
	o.ensureDefaults()
	m, err := Verify(dir)
	if err != nil {
		return nil, err
	}
	kvs, err := db.Scan(ctx, nil, nil, 1)
	if err != nil {
		return nil, fmt.Errorf("checking that the cluster is empty: %w", err)
	}
	if len(kvs) > 0 {
		return nil, fmt.Errorf("%w: it holds user key %q; restore loads into a new, empty cluster", ErrNotEmpty, kvs[0].Key)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []client.Write, o.Workers)
	var (
		mu       sync.Mutex
		firstErr error
		done     Progress
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ws := range batches {
				if err := loadBatch(ctx, db, ws, o.AttemptsMax); err != nil {
					fail(fmt.Errorf("loading %d keys from %q: %w", len(ws), ws[0].Key, err))
					continue
				}
				mu.Lock()
				done.Keys += int64(len(ws))
				for _, w := range ws {
					done.Bytes += int64(len(w.Key) + len(w.Value))
				}
				if o.Progress != nil {
					o.Progress(done) // under mu: one call at a time
				}
				mu.Unlock()
			}
		}()
	}

	var batch []client.Write
	batchBytes := 0
	send := func() bool {
		if len(batch) == 0 {
			return true
		}
		select {
		case batches <- batch:
		case <-ctx.Done():
			return false
		}
		batch, batchBytes = nil, 0
		return true
	}
	var after []byte
	for _, fi := range m.Files {
		after, err = readDataFile(dir, fi, after, func(k, v []byte) error {
			if len(batch) > 0 && (len(batch) >= o.BatchKeys || batchBytes+len(k)+len(v) > o.BatchBytes) {
				if !send() {
					return ctx.Err()
				}
			}
			batch = append(batch, client.Write{Key: k, Value: v})
			batchBytes += len(k) + len(v)
			return nil
		})
		if err != nil {
			break
		}
		mu.Lock()
		done.Files++
		done.LastKey = after
		mu.Unlock()
	}
	if err == nil {
		send()
	}
	close(batches)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err != nil {
		// The file checked out in Verify but not now: it changed meanwhile.
		return nil, fmt.Errorf("reading the backup after it was verified: %w", err)
	}
	if o.Progress != nil {
		done.Done = true
		o.Progress(done)
	}
	return m, nil
}

// loadBatch commits ws in one transaction (one-phase when they fall in
// one range), again after an ambiguous, retryable or unavailable outcome.
func loadBatch(ctx context.Context, db *client.DB, ws []client.Write, attempts int) error {
	return retry(ctx, attempts, func(err error) bool {
		return errors.Is(err, client.ErrAmbiguous) || errors.Is(err, client.ErrRetryable) || errors.Is(err, client.ErrUnavailable)
	}, func() error {
		return db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
			return txn.CommitWith(ctx, ws...)
		})
	})
}
