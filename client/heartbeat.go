package client

import (
	"context"

	"github.com/canopy-db/canopy/internal/tso"
	"sync"
	"time"
)

// heartbeat keeps a transaction's heartbeat record (keys.HeartbeatKey of
// its start_ts: an 8-byte big-endian expiry in Unix ms) in the future while
// the transaction runs, so that readers meeting its intents wait instead
// of aborting it.
//
// A transaction with no record is alive until its start time plus
// HeartbeatTTL: the high bits of start_ts are the oracle's wall-clock
// milliseconds (see startMillis), so a reader can tell its age without a
// record. Most transactions finish well within that, so they never write a
// record: the first write happens only at the first refresh, HeartbeatTTL/5
// after the first intent, or at once if the transaction is already older
// than HeartbeatTTL/5 when it writes its first intent. This saves one Raft
// write before the first intent and one delete after the decision.
//
// Rejected: writing the record before the first intent (one more Raft
// round on every transaction's critical path, for the rare long one).
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

// ensureHeartbeat starts keeping the transaction alive, once per
// transaction, before its first intent. It writes the record at once only
// if the transaction is already too old for the implicit lifetime to
// cover the wait for the first refresh.
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
	db := t.db
	age := db.opts.Clock().Sub(time.UnixMilli(startMillis(t.startTs)))
	if age >= db.opts.HeartbeatTTL/5 {
		h.mu.written = true
		if err := db.plainPut(ctx, t.heartbeatKey, heartbeatValue(db.opts.Clock().Add(db.opts.HeartbeatTTL)), false); err != nil {
			return err
		}
	}
	h.mu.running = true
	h.mu.stop = make(chan struct{})
	h.mu.done = make(chan struct{})
	go t.heartbeatLoop(h.mu.stop, h.mu.done)
	return nil
}

// markWritten records, unless the heartbeat was stopped, that a write of
// the record is about to be sent (so the record is deleted after the
// decision). It reports whether to send it.
func (h *heartbeat) markWritten() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.stopped {
		return false
	}
	h.mu.written = true
	return true
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
			if !t.hb.markWritten() {
				return
			}
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

// startMillis returns the wall-clock milliseconds of an oracle timestamp
// (its bits above the logical counter). The oracle may run ahead of the
// wall clock after a failover (by at most its bound), which only makes a
// transaction look younger: readers wait longer, never abort early.
func startMillis(ts uint64) int64 { return int64(ts >> tso.DefaultLogicalBits) }
