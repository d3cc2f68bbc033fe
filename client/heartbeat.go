package client

import (
	"context"
	"sync"
	"time"
)

// heartbeat keeps a transaction's heartbeat record (keys.HeartbeatKey of
// its start_ts: an 8-byte big-endian expiry in Unix ms) in the future while
// the transaction runs, so that readers meeting its intents wait instead
// of aborting it. The record is written before the first intent (so a
// reader never sees an intent without a way to tell whether its writer is
// alive), refreshed every HeartbeatTTL/5, and deleted after the decision
// by the intent resolver.
//
// Liveness only: if refreshes fail and the record expires, a reader may
// abort the transaction with put-unless-exists; its own commit
// put-unless-exists then fails and the commit is reported retryable (I1).
type heartbeat struct {
	mu struct {
		sync.Mutex
		// written: a write of the record may have been applied (the record
		// must be deleted after the decision).
		written bool
		// running: the refresh goroutine was started; stop ends it.
		running bool
		stopped bool
		stop    chan struct{}
		done    chan struct{}
	}
}

// ensureHeartbeat writes the heartbeat record and starts refreshing it,
// once per transaction. Concurrent first writers wait for the first.
func (t *Txn) ensureHeartbeat(ctx context.Context) error {
	h := &t.hb
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.running {
		return nil
	}
	if h.mu.stopped {
		return invalidArgf("transaction %d is finished", t.startTs)
	}
	h.mu.written = true
	db := t.db
	if err := db.plainPut(ctx, t.heartbeatKey, heartbeatValue(db.opts.Clock().Add(db.opts.HeartbeatTTL)), false); err != nil {
		return err
	}
	h.mu.running = true
	h.mu.stop = make(chan struct{})
	h.mu.done = make(chan struct{})
	go t.heartbeatLoop(h.mu.stop, h.mu.done)
	return nil
}

func (t *Txn) heartbeatLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	db := t.db
	interval := db.opts.HeartbeatTTL / 5
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	lifetime := time.NewTimer(db.opts.TxnLifetimeMax)
	defer lifetime.Stop()
	for {
		select {
		case <-stop:
			return
		case <-db.ctx.Done():
			return
		case <-lifetime.C:
			db.opts.Logger.Warn("canopy client: transaction neither committed nor rolled back within TxnLifetimeMax; heartbeat stopped",
				"start_ts", t.startTs, "lifetime", db.opts.TxnLifetimeMax)
			return
		case <-ticker.C:
			// Each refresh is bounded by the interval so that refreshes
			// never pile up; a missed one is covered by the next (the TTL
			// spans five intervals).
			ctx, cancel := context.WithTimeout(db.ctx, interval)
			err := db.plainPut(ctx, t.heartbeatKey, heartbeatValue(db.opts.Clock().Add(db.opts.HeartbeatTTL)), false)
			cancel()
			if err != nil && db.ctx.Err() == nil {
				db.opts.Logger.Debug("canopy client: heartbeat refresh failed", "start_ts", t.startTs, "err", err)
			}
		}
	}
}

// stopHeartbeat ends the refreshes. It reports whether the record may
// exist, and a channel closed once no refresh can be in flight (nil if
// none was started).
func (t *Txn) stopHeartbeat() (written bool, done <-chan struct{}) {
	h := &t.hb
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.running && !h.mu.stopped {
		close(h.mu.stop)
	}
	h.mu.stopped = true
	return h.mu.written, h.mu.done
}

// heartbeatWritten reports whether the record may exist.
func (t *Txn) heartbeatWritten() bool {
	t.hb.mu.Lock()
	defer t.hb.mu.Unlock()
	return t.hb.mu.written
}
