package client

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/canopy-db/canopy/internal/tso"
)

// txnHeartbeater is the top layer of the coordinator (txn_layers.go). It
// keeps a transaction's heartbeat record (keys.HeartbeatKey of its
// start_ts: an 8-byte big-endian expiry in Unix ms) in the future while
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
// Requests: before the first opWrite goes down, the heartbeat starts;
// after opCommit or opAbort comes back (whatever the outcome), it stops.
// Everything else passes through.
//
// Rejected: writing the record before the first intent (one more Raft
// round on every transaction's critical path, for the rare long one).
//
// Liveness only: if refreshes fail and the record expires, a reader may
// abort the transaction with put-unless-exists; its own commit
// put-unless-exists then fails and the commit is reported retryable (I1).
type txnHeartbeater struct {
	next txnLayer
	cfg  heartbeatConfig
	// onReads: start before the first read too (2pc-locking, whose reads
	// take locks that others wait for). Set before the first send.
	onReads bool

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

// heartbeatConfig is what a heartbeater needs from its DB and transaction.
type heartbeatConfig struct {
	startTs uint64
	// ttl is Options.HeartbeatTTL; the record is refreshed every ttl/5.
	ttl time.Duration
	// lifetimeMax is Options.TxnLifetimeMax.
	lifetimeMax time.Duration
	clock       func() time.Time
	logger      *slog.Logger
	// bg is the DB's background context: refreshes end when it does.
	bg context.Context
	// putRecord writes the heartbeat record with the given expiry.
	putRecord func(ctx context.Context, expiry time.Time) error
	// ticks, if not nil, replaces the refresh ticker (step tests).
	ticks <-chan time.Time
}

func newHeartbeater(next txnLayer, cfg heartbeatConfig) *txnHeartbeater {
	return &txnHeartbeater{next: next, cfg: cfg}
}

func (h *txnHeartbeater) send(ctx context.Context, r *txnReq) (*txnResp, error) {
	switch r.op {
	case opGet, opScan:
		if h.onReads {
			if err := h.ensure(ctx); err != nil {
				return nil, err
			}
		}
	case opWrite:
		if err := h.ensure(ctx); err != nil {
			return nil, err
		}
	case opCommit, opAbort:
		resp, err := h.next.send(ctx, r)
		h.stop()
		return resp, err
	}
	return h.next.send(ctx, r)
}

// ensure starts keeping the transaction alive, once per transaction,
// before its first intent. It writes the record at once only if the
// transaction is already too old for the implicit lifetime to cover the
// wait for the first refresh.
func (h *txnHeartbeater) ensure(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.stopped {
		return invalidArgf("transaction %d is finished", h.cfg.startTs)
	}
	if h.mu.running {
		return nil
	}
	age := h.cfg.clock().Sub(time.UnixMilli(startMillis(h.cfg.startTs)))
	if age >= h.cfg.ttl/5 {
		h.mu.written = true
		if err := h.cfg.putRecord(ctx, h.cfg.clock().Add(h.cfg.ttl)); err != nil {
			return err
		}
	}
	h.mu.running = true
	h.mu.stop = make(chan struct{})
	h.mu.done = make(chan struct{})
	go h.loop(h.mu.stop, h.mu.done)
	return nil
}

// markWritten records, unless the heartbeat was stopped, that a write of
// the record is about to be sent (so the record is deleted after the
// decision). It reports whether to send it.
func (h *txnHeartbeater) markWritten() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.stopped {
		return false
	}
	h.mu.written = true
	return true
}

func (h *txnHeartbeater) loop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	interval := h.cfg.ttl / 5
	ticks := h.cfg.ticks
	if ticks == nil {
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		ticks = ticker.C
	}
	lifetime := time.NewTimer(h.cfg.lifetimeMax)
	defer lifetime.Stop()
	for {
		select {
		case <-stop:
			return
		case <-h.cfg.bg.Done():
			return
		case <-lifetime.C:
			h.cfg.logger.Warn("canopy client: transaction neither committed nor rolled back within TxnLifetimeMax; heartbeat stopped",
				"start_ts", h.cfg.startTs, "lifetime", h.cfg.lifetimeMax)
			return
		case <-ticks:
			if !h.markWritten() {
				return
			}
			// Each refresh is bounded by the interval so that refreshes
			// never pile up; a missed one is covered by the next (the TTL
			// spans five intervals).
			ctx, cancel := context.WithTimeout(h.cfg.bg, interval)
			err := h.cfg.putRecord(ctx, h.cfg.clock().Add(h.cfg.ttl))
			cancel()
			if err != nil && h.cfg.bg.Err() == nil {
				h.cfg.logger.Debug("canopy client: heartbeat refresh failed", "start_ts", h.cfg.startTs, "err", err)
			}
		}
	}
}

// stop ends the refreshes; it may be called more than once. It reports
// whether the record may exist, and a channel closed once no refresh can
// be in flight (nil if none was started).
func (h *txnHeartbeater) stop() (written bool, done <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.running && !h.mu.stopped {
		close(h.mu.stop)
	}
	h.mu.stopped = true
	return h.mu.written, h.mu.done
}

// written reports whether the record may exist.
func (h *txnHeartbeater) written() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.written
}

// startMillis returns the wall-clock milliseconds of an oracle timestamp
// (its bits above the logical counter). The oracle may run ahead of the
// wall clock after a failover (by at most its bound), which only makes a
// transaction look younger: readers wait longer, never abort early.
func startMillis(ts uint64) int64 { return int64(ts >> tso.DefaultLogicalBits) }
