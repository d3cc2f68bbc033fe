package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// Errors that end a watch (besides ErrInvalidArgument, ErrUnavailable,
// ErrInternal and the context's).
var (
	// ErrCompacted: the watch starts below a range's version-GC threshold,
	// so history it needs may be gone. *CompactedError names the threshold;
	// watch again from at or above it.
	ErrCompacted = errors.New("canopy: compacted")
	// ErrSlowWatcher: the watcher did not read its events as fast as the
	// cluster produced them; a range's leaseholder cancelled it rather than
	// buffer without bound or stall writers.
	ErrSlowWatcher = errors.New("canopy: watcher too slow")
)

// CompactedError is the error of a watch that starts below a range's
// version-GC threshold.
type CompactedError struct {
	FromTs, GCThreshold uint64
	Msg                 string
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("%v: watch from %d is below the version-GC threshold %d: %s", ErrCompacted, e.FromTs, e.GCThreshold, e.Msg)
}

// Is makes errors.Is(err, ErrCompacted) true.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }

// Span is a span of user keys [Start, End); a nil End means the end of the
// keyspace.
type Span struct{ Start, End []byte }

// PrefixSpan returns the span of the keys that start with prefix.
func PrefixSpan(prefix []byte) Span {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return Span{Start: bytes.Clone(prefix), End: end[:i+1]}
		}
	}
	return Span{Start: bytes.Clone(prefix)}
}

// WatchEvent is one item of a watch: a committed change (Resolved == 0),
// or a resolved timestamp (Resolved != 0, the other fields empty).
type WatchEvent struct {
	Key []byte
	// Value is the key's value at Ts; nil when Deleted.
	Value   []byte
	Deleted bool
	// Ts is the change's commit timestamp. The changes of one transaction
	// share it; no two transactions have the same one.
	Ts uint64
	// Resolved: every change of the span at or below it has been
	// delivered, and none will follow.
	Resolved uint64
}

// WatchOptions configures a watch. Zero fields take defaults.
type WatchOptions struct {
	// EventsBuffered is the capacity of the Events channel (default
	// 1024). A reader that falls behind further makes the ranges'
	// buffers fill, and the watch ends with ErrSlowWatcher.
	EventsBuffered int
	// SeenMax bounds, per range, the changes delivered above the range's
	// resolved timestamp that the watch remembers to drop them when a
	// resumed feed sends them again (default 1<<20); past it the watch
	// ends with ErrUnavailable.
	SeenMax int
	// PushAfter: an intent that has held a range's resolved timestamp back
	// this long is pushed (its transaction looked up and, if abandoned,
	// aborted; default 2s).
	PushAfter time.Duration
	// RetryUntilDone: a range that cannot be followed within
	// Options.SendAttemptsMax attempts is tried again (at the longest
	// backoff, logged once per round of attempts) until the watch's context
	// ends, instead of ending the watch with ErrUnavailable. For a server
	// whose watchers must outlive any outage, as etcd's do (the etcd API).
	RetryUntilDone bool
}

// WatchOption sets a watch option.
type WatchOption func(*WatchOptions)

// WithWatchOptions sets every watch option at once.
func WithWatchOptions(o WatchOptions) WatchOption { return func(p *WatchOptions) { *p = o } }

func (o *WatchOptions) ensureDefaults() {
	if o.EventsBuffered <= 0 {
		o.EventsBuffered = 1024
	}
	if o.SeenMax <= 0 {
		o.SeenMax = 1 << 20
	}
	if o.PushAfter <= 0 {
		o.PushAfter = 2 * time.Second
	}
}

// Watcher is a running watch; see DB.Watch.
type Watcher struct {
	db     *DB
	opts   WatchOptions
	fromTs uint64
	events chan WatchEvent
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// resumes counts the range feeds started again after one ended.
	resumes atomic.Int64
	// roundsGivenUp counts the rounds of SendAttemptsMax attempts that
	// ended without following the range (RetryUntilDone only).
	roundsGivenUp atomic.Int64

	// emitMu orders the resolved timestamps sent (they never go down).
	emitMu       sync.Mutex
	lastResolved uint64
	mu           struct {
		sync.Mutex
		pieces map[*watchPiece]struct{}
		err    error
	}
	done chan struct{}
}

// watchPiece is a part of the watched span that one range holds (as far
// as the watch knows): its own rangefeed, resumed after every failure
// from its resolved timestamp.
type watchPiece struct {
	start, end []byte // logical keys
	// resolved: every change of the piece at or below it was delivered.
	// Guarded by Watcher.mu (written by the piece's goroutine only).
	resolved uint64
	// seen: the changes delivered above resolved (key + ts), dropped when
	// a resumed feed sends them again. Piece goroutine only.
	seen map[string]struct{}
}

func seenKey(k []byte, ts uint64) string {
	return string(binary.BigEndian.AppendUint64(bytes.Clone(k), ts))
}

// Watch streams every committed change of span above fromTs (0: from a
// fresh timestamp, i.e. changes from now on), in commit-timestamp order per
// key, with span-wide resolved timestamps, until ctx ends, Close is called
// or it fails. It catches up from MVCC history first, then follows live
// changes. It splits the span by range, and resumes each range's feed,
// from that range's last resolved timestamp, after a leaseholder change, a
// split or a node restart, dropping the changes it already delivered: no
// change is lost or delivered twice.
//
// Changes of different keys may come out of commit-timestamp order; a
// reader that wants them in order (etcd's revisions) sorts what it holds
// at or below each resolved timestamp. The changes of one transaction come
// with the same Ts.
//
// Read Events until it is closed, then Err says why. Errors:
// ErrInvalidArgument (bad span), *CompactedError (ErrCompacted),
// ErrSlowWatcher, ErrUnavailable (a range could not be followed within
// Options.SendAttemptsMax attempts), ErrPermission (a node refused the
// caller's credentials: not retried), or the context's error.
func (db *DB) Watch(ctx context.Context, span Span, fromTs uint64, opts ...WatchOption) (*Watcher, error) {
	var o WatchOptions
	for _, f := range opts {
		f(&o)
	}
	o.ensureDefaults()
	if err := checkKey(span.Start); err != nil && len(span.Start) > 0 {
		return nil, err
	}
	start := keys.UserKey(span.Start)
	end := keys.UserSpanEnd(span.End)
	if span.End != nil {
		if err := checkKey(span.End); err != nil {
			return nil, err
		}
		end = keys.UserKey(span.End)
	}
	if bytes.Compare(start, end) >= 0 {
		return nil, invalidArgf("watch span [%q, %q) is empty", span.Start, span.End)
	}
	if fromTs == 0 {
		ts, err := db.oracle.timestamp(ctx)
		if err != nil {
			return nil, err
		}
		fromTs = ts
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &Watcher{db: db, opts: o, fromTs: fromTs, events: make(chan WatchEvent, o.EventsBuffered),
		ctx: wctx, cancel: cancel, done: make(chan struct{})}
	w.mu.pieces = map[*watchPiece]struct{}{}
	w.startPiece(&watchPiece{start: start, end: end, resolved: fromTs, seen: map[string]struct{}{}})
	go func() {
		w.wg.Wait()
		close(w.events)
		close(w.done)
	}()
	return w, nil
}

// Events delivers the watch's changes and resolved timestamps; it is
// closed when the watch ends.
func (w *Watcher) Events() <-chan WatchEvent { return w.events }

// FromTs is the timestamp the watch started above.
func (w *Watcher) FromTs() uint64 { return w.fromTs }

// Resumes returns how many times a range's feed was started again after
// it ended (leaseholder changes, splits, node restarts, transport errors).
func (w *Watcher) Resumes() int { return int(w.resumes.Load()) }

// Err returns why the watch ended, once Events is closed (nil before).
func (w *Watcher) Err() error {
	select {
	case <-w.done:
	default:
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.err
}

// Close ends the watch and waits for its goroutines.
func (w *Watcher) Close() {
	w.cancel()
	for range w.events {
	}
	<-w.done
}

// fail ends the watch with err (the first error wins).
func (w *Watcher) fail(err error) {
	w.mu.Lock()
	if w.mu.err == nil {
		w.mu.err = err
	}
	w.mu.Unlock()
	w.cancel()
}

func (w *Watcher) startPiece(p *watchPiece) {
	w.mu.Lock()
	w.mu.pieces[p] = struct{}{}
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := w.runPiece(p); err != nil {
			if w.ctx.Err() != nil && errors.Is(err, w.ctx.Err()) {
				// The watch's context ended: the caller's, or Close.
				w.fail(w.ctx.Err())
				return
			}
			w.fail(err)
		}
	}()
}

// send delivers ev unless the watch ends first.
func (w *Watcher) send(ev WatchEvent) error {
	select {
	case w.events <- ev:
		return nil
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
}

// advance records p's new resolved timestamp and sends the span's, if it
// rose.
func (w *Watcher) advance(p *watchPiece, resolved uint64) error {
	w.emitMu.Lock()
	defer w.emitMu.Unlock()
	w.mu.Lock()
	p.resolved = resolved
	min := uint64(0)
	for q := range w.mu.pieces {
		if min == 0 || q.resolved < min {
			min = q.resolved
		}
	}
	w.mu.Unlock()
	if min <= w.lastResolved {
		return nil
	}
	w.lastResolved = min
	return w.send(WatchEvent{Resolved: min})
}

// runPiece follows p's range until the watch ends or fails.
func (w *Watcher) runPiece(p *watchPiece) error {
	db := w.db
	s := db.sender
	bo := db.sender.backoff()
	var (
		lastErr     error
		unreachable map[uint64]bool
		push        intentPusher
	)
	for attempt := 0; ; attempt++ {
		if attempt >= db.sender.timing.sendAttempts() {
			if !w.opts.RetryUntilDone {
				return giveUp(false, fmt.Sprintf("watch of [%q, %q)", p.start, p.end), lastErr)
			}
			db.opts.Logger.Warn("canopy client: a watched range could not be followed; trying again",
				"start", p.start, "end", p.end, "attempts", attempt, "err", lastErr)
			w.roundsGivenUp.Add(1)
			attempt, unreachable = 1, nil // bo stays at its longest
		}
		if attempt > 0 {
			if err := sleepCtx(w.ctx, bo.next()); err != nil {
				return err
			}
		}
		e, err := s.lookup(w.ctx, p.start)
		if err != nil {
			if w.ctx.Err() != nil {
				return w.ctx.Err()
			}
			lastErr = err
			continue
		}
		d := e.desc
		if bytes.Compare(d.GetStartKey(), p.start) > 0 {
			s.cache.evict(e)
			lastErr = fmt.Errorf("range %d [%q, %q) does not hold %q", d.GetRangeId(), d.GetStartKey(), d.GetEndKey(), p.start)
			continue
		}
		if len(d.GetEndKey()) > 0 && bytes.Compare(d.GetEndKey(), p.end) < 0 {
			// The range ends inside the piece (a split, or a first look
			// up): the rest becomes a piece of its own, from the same
			// resolved timestamp, with the changes already seen there.
			rest := &watchPiece{start: bytes.Clone(d.GetEndKey()), end: p.end, resolved: p.resolved, seen: map[string]struct{}{}}
			for k := range p.seen {
				if bytes.Compare([]byte(k[:len(k)-8]), rest.start) >= 0 {
					rest.seen[k] = struct{}{}
					delete(p.seen, k)
				}
			}
			p.end = rest.start
			w.startPiece(rest)
		}
		nodeID, addr := s.target(e, attempt, unreachable)
		if addr == "" {
			lastErr = fmt.Errorf("no address known for range %d", d.GetRangeId())
			continue
		}
		fc, err := db.nodes.feedClient(addr)
		if err != nil {
			return err
		}
		progress, fe, err := w.stream(p, fc, d.GetRangeId(), &push)
		w.resumes.Add(1)
		if progress {
			// The feed delivered: the attempts count from here, and nodes
			// that failed before may be back.
			attempt, bo, unreachable = 0, db.sender.backoff(), nil
		}
		if w.ctx.Err() != nil {
			return w.ctx.Err()
		}
		if err != nil {
			if !errors.Is(err, errFeedTransport) {
				return err
			}
			lastErr = fmt.Errorf("node %d at %s: %w", nodeID, addr, err)
			s.cache.clearLeaseholder(d.GetRangeId(), nodeID)
			if unreachable == nil {
				unreachable = map[uint64]bool{}
			}
			unreachable[nodeID] = true
			continue
		}
		pe := fe.GetError()
		lastErr = fmt.Errorf("range %d at node %d (%s): %s: %s: %s", d.GetRangeId(), nodeID, addr, fe.GetReason(), pe.GetCode(), pe.GetMessage())
		switch fe.GetReason() {
		case rpcpb.FeedError_COMPACTED:
			return &CompactedError{FromTs: p.resolved, GCThreshold: fe.GetGcThreshold(), Msg: pe.GetMessage()}
		case rpcpb.FeedError_SLOW_CONSUMER:
			return fmt.Errorf("%w: %s", ErrSlowWatcher, pe.GetMessage())
		case rpcpb.FeedError_INVALID_ARGUMENT:
			return fmt.Errorf("%w: %s", ErrInvalidArgument, pe.GetMessage())
		case rpcpb.FeedError_RANGE_CHANGED:
			s.cache.evict(e)
			if r := pe.GetRange(); r != nil {
				s.cache.insert(r, 0)
			}
			continue
		}
		switch pe.GetCode() {
		case rpcpb.ErrorCode_NOT_LEASEHOLDER:
			hint := pe.GetLeaseholderHint()
			db.nodes.set(hint, pe.GetLeaseholderAddress())
			if hint != 0 && hint != nodeID {
				s.cache.setLeaseholder(d.GetRangeId(), hint)
				delete(unreachable, hint) // the range says it is back
			} else {
				s.cache.clearLeaseholder(d.GetRangeId(), nodeID)
			}
		case rpcpb.ErrorCode_RANGE_NOT_FOUND:
			s.cache.evict(e)
			s.cache.clearLeaseholder(d.GetRangeId(), nodeID)
		case rpcpb.ErrorCode_RANGE_KEY_MISMATCH:
			s.cache.evict(e)
			if r := pe.GetRange(); r != nil {
				s.cache.insert(r, 0)
			}
		case rpcpb.ErrorCode_INTERNAL:
			return fmt.Errorf("%w: %s", ErrInternal, lastErr)
		default:
			s.cache.clearLeaseholder(d.GetRangeId(), nodeID)
		}
	}
}

// errFeedTransport marks a stream that broke in transport.
var errFeedTransport = errors.New("rangefeed stream broke")

// stream runs one rangefeed of p at fc until it ends. progress: it
// delivered changes or a resolved timestamp. It returns the server's error event, or an error:
// errFeedTransport-wrapped for a broken stream, or one that ends the watch.
func (w *Watcher) stream(p *watchPiece, fc rpcpb.FeedClient, rangeID uint64, push *intentPusher) (progress bool, fe *rpcpb.FeedError, err error) {
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	st, err := fc.RangeFeed(w.db.nodes.outgoing(ctx), &rpcpb.RangeFeedRequest{RangeId: rangeID, StartKey: p.start, EndKey: p.end, FromTs: p.resolved})
	if refused(err) {
		return false, nil, unstop(err) // ErrPermission: ends the watch
	}
	if err != nil {
		return false, nil, fmt.Errorf("%w: %w", errFeedTransport, err)
	}
	for {
		m, err := st.Recv()
		if refused(err) {
			return progress, nil, unstop(err)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("stream ended without an error event")
			}
			return progress, nil, fmt.Errorf("%w: %w", errFeedTransport, err)
		}
		if m.GetError() != nil {
			return progress, m.GetError(), nil
		}
		progress = true
		for _, v := range m.GetValues() {
			if v.GetCommitTs() <= p.resolved {
				return progress, nil, fmt.Errorf("%w: range %d sent a change at %d, at or below its resolved timestamp %d", ErrInternal, rangeID, v.GetCommitTs(), p.resolved)
			}
			sk := seenKey(v.GetKey(), v.GetCommitTs())
			if _, dup := p.seen[sk]; dup {
				continue
			}
			if len(p.seen) >= w.opts.SeenMax {
				return progress, nil, fmt.Errorf("%w: %d changes of [%q, %q) above its resolved timestamp %d (WatchOptions.SeenMax)", ErrUnavailable, len(p.seen), p.start, p.end, p.resolved)
			}
			k, err := keys.StripUser(v.GetKey())
			if err != nil {
				return progress, nil, fmt.Errorf("%w: rangefeed sent %v", ErrInternal, err)
			}
			p.seen[sk] = struct{}{}
			ev := WatchEvent{Key: k, Deleted: v.GetDeleted(), Ts: v.GetCommitTs()}
			if !v.GetDeleted() {
				ev.Value = v.GetValue()
				if ev.Value == nil {
					ev.Value = []byte{}
				}
			}
			if err := w.send(ev); err != nil {
				return progress, nil, err
			}
		}
		cp := m.GetCheckpoint()
		if cp != nil {
			push.observe(w, cp.GetBlocking())
		}
		if cp != nil && cp.GetResolvedTs() > p.resolved {
			r := cp.GetResolvedTs()
			for k := range p.seen {
				if binary.BigEndian.Uint64([]byte(k[len(k)-8:])) <= r {
					delete(p.seen, k)
				}
			}
			if err := w.advance(p, r); err != nil {
				return progress, nil, err
			}
		}
	}
}

// intentPusher pushes the transaction of an intent that holds a range's
// resolved timestamp back for WatchOptions.PushAfter: it looks its status
// up and resolves the intent, aborting the transaction if its heartbeat
// expired, as a reader that meets an intent does. One push at a time.
type intentPusher struct {
	startTs uint64
	since   time.Time
	running chan struct{}
}

func (ip *intentPusher) observe(w *Watcher, b *rpcpb.Intent) {
	if b == nil {
		ip.startTs = 0
		return
	}
	now := time.Now()
	if b.GetTxn().GetStartTs() != ip.startTs {
		ip.startTs, ip.since = b.GetTxn().GetStartTs(), now
		return
	}
	if now.Sub(ip.since) < w.opts.PushAfter {
		return
	}
	if ip.running != nil {
		select {
		case <-ip.running:
		default:
			return // the last push is still going
		}
	}
	ip.since = now
	done := make(chan struct{})
	ip.running = done
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer close(done)
		ctx, cancel := context.WithTimeout(w.ctx, w.db.opts.IntentWaitMax+w.db.opts.RPCTimeout)
		defer cancel()
		_ = w.db.resolveForeign(ctx, []*rpcpb.Intent{b}, waiter{})
	}()
}
