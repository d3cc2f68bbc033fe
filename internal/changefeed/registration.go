package changefeed

import (
	"bytes"
	"context"
	"errors"
	"sync"
)

// ErrSlowConsumer ends a registration whose buffer overflowed: its watcher
// did not take events as fast as the range produced them. The apply loop
// never waits for a watcher; the watcher resumes from its last resolved
// timestamp once it can keep up.
var ErrSlowConsumer = errors.New("changefeed: watcher too slow: its event buffer is full")

// Event is one item of a rangefeed: a committed change (Resolved == 0) or
// a resolved timestamp (Resolved != 0, Key nil).
type Event struct {
	Key     []byte
	Value   []byte
	Deleted bool
	// Ts is a change's commit timestamp.
	Ts uint64
	// Resolved: no change at or below it will be emitted after this event.
	Resolved uint64
	// Blocking, with a resolved timestamp, is the oldest unresolved intent
	// when it holds the resolved timestamp below the closed timestamp (a
	// watcher may push its transaction); nil otherwise.
	Blocking *Intent
}

func (e *Event) size() int64 { return int64(len(e.Key) + len(e.Value) + 32) }

// Intent is an unresolved intent as the processor knows it.
type Intent struct {
	Key          []byte
	StartTs      uint64
	HeartbeatKey []byte
}

// Registration is one watcher of a span of a processor's range. Its
// events go through a bounded buffer that the watcher drains with Next.
type Registration struct {
	p          *Processor
	start, end []byte
	fromTs     uint64
	// afterIndex: events of commands at or below this applied index are in
	// the registration's catch-up scan and are not delivered live.
	afterIndex uint64

	mu struct {
		sync.Mutex
		buf   []Event
		bytes int64
		err   error
		// resolved is the last resolved timestamp buffered.
		resolved uint64
	}
	// signal has room for one wake-up: pushes never block.
	signal chan struct{}
}

func (r *Registration) contains(k []byte) bool {
	return bytes.Compare(k, r.start) >= 0 && (len(r.end) == 0 || bytes.Compare(k, r.end) < 0)
}

// push adds ev to the buffer, or fails the registration if it is full.
// It reports whether the registration is still live. Never blocks.
func (r *Registration) push(ev Event, opts *Options) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.err != nil {
		return false
	}
	if ev.Resolved != 0 {
		// A resolved timestamp that did not move is still sent when an
		// intent holds it back, so that the watcher can push it.
		if ev.Resolved < r.mu.resolved || (ev.Resolved == r.mu.resolved && ev.Blocking == nil) {
			return true
		}
		r.mu.resolved = ev.Resolved
		if n := len(r.mu.buf); n > 0 && r.mu.buf[n-1].Resolved != 0 {
			r.mu.buf[n-1] = ev // a newer promise replaces an unread one
			r.wake()
			return true
		}
	}
	if len(r.mu.buf) >= opts.EventsMax || r.mu.bytes+ev.size() > opts.BytesMax {
		r.failLocked(ErrSlowConsumer)
		return false
	}
	r.mu.buf = append(r.mu.buf, ev)
	r.mu.bytes += ev.size()
	r.wake()
	return true
}

func (r *Registration) wake() {
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

func (r *Registration) failLocked(err error) {
	if r.mu.err == nil {
		r.mu.err = err
		r.mu.buf, r.mu.bytes = nil, 0
		r.wake()
	}
}

// Next returns the buffered events, in order, waiting for at least one.
// After the registration ends it returns its error (ErrSlowConsumer, or
// what the processor was stopped with), buffered events first; if ctx
// ends first, ctx's error.
func (r *Registration) Next(ctx context.Context) ([]Event, error) {
	for {
		r.mu.Lock()
		if len(r.mu.buf) > 0 {
			out := r.mu.buf
			r.mu.buf, r.mu.bytes = nil, 0
			r.mu.Unlock()
			return out, nil
		}
		if err := r.mu.err; err != nil {
			r.mu.Unlock()
			return nil, err
		}
		r.mu.Unlock()
		select {
		case <-r.signal:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close removes the registration from its processor (the watcher left).
func (r *Registration) Close() { r.p.unregister(r) }
