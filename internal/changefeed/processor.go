package changefeed

import (
	"errors"
	"sync"
)

// Options bounds a processor's registrations. Zero fields take defaults.
type Options struct {
	// EventsMax is the most events one registration buffers (default
	// 8192); BytesMax the most bytes of keys and values (default 16 MiB).
	// A registration past either is cancelled with ErrSlowConsumer.
	EventsMax int
	BytesMax  int64
	// RegistrationsMax bounds the registrations of one processor (default
	// 1024); Register refuses more with ErrTooManyWatchers.
	RegistrationsMax int
}

// Defaults of Options.
const (
	DefaultEventsMax        = 8192
	DefaultBytesMax         = 16 << 20
	DefaultRegistrationsMax = 1024
)

// EnsureDefaults fills zero fields.
func (o *Options) EnsureDefaults() {
	if o.EventsMax <= 0 {
		o.EventsMax = DefaultEventsMax
	}
	if o.BytesMax <= 0 {
		o.BytesMax = DefaultBytesMax
	}
	if o.RegistrationsMax <= 0 {
		o.RegistrationsMax = DefaultRegistrationsMax
	}
}

// ErrTooManyWatchers: the range has Options.RegistrationsMax watchers.
var ErrTooManyWatchers = errors.New("changefeed: too many watchers of one range")

// ErrNotInitialized: Register was called before Init (a host bug: the
// registration would miss the commands Init accounts for).
var ErrNotInitialized = errors.New("changefeed: register before the processor is initialized")

type indexedOps struct {
	index uint64
	ops   []Op
}

type txnIntents struct {
	count        int
	key          []byte // one of its keys (for a watcher's push)
	heartbeatKey []byte
}

// Processor is a range's rangefeed at its leaseholder: it follows the
// unresolved intents and the closed timestamp, computes the resolved
// timestamp, and fans events out to registrations. See the package
// comment for the host's contract. Safe for concurrent use.
type Processor struct {
	opts Options
	mu   struct {
		sync.Mutex
		// staged: ops applied but whose batch has not committed yet.
		staged []indexedOps
		// initialized: Init ran; before, flushed ops wait in pending.
		initialized bool
		initIndex   uint64
		pending     []indexedOps
		// intents: key -> start_ts of its unresolved intent; txns counts
		// them per transaction. Invariant: the counts of txns sum to
		// len(intents).
		intents map[string]uint64
		txns    map[uint64]*txnIntents
		closed  uint64
		// resolved: the last resolved timestamp published. Invariant:
		// never decreases; <= closed.
		resolved uint64
		regs     map[*Registration]struct{}
		stopped  error
	}
}

// NewProcessor returns a processor that is not initialized yet.
func NewProcessor(opts Options) *Processor {
	opts.EnsureDefaults()
	p := &Processor{opts: opts}
	p.mu.intents = map[string]uint64{}
	p.mu.txns = map[uint64]*txnIntents{}
	p.mu.regs = map[*Registration]struct{}{}
	return p
}

// Stage records the ops of the command applied at index (its batch not
// committed yet).
func (p *Processor) Stage(index uint64, ops []Op) {
	if len(ops) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.stopped == nil {
		p.mu.staged = append(p.mu.staged, indexedOps{index, ops})
	}
}

// Flush publishes the staged ops of commands at or below index: their
// batch has committed.
func (p *Processor) Flush(index uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for n < len(p.mu.staged) && p.mu.staged[n].index <= index {
		io := p.mu.staged[n]
		if p.mu.initialized {
			p.applyLocked(io)
		} else {
			p.mu.pending = append(p.mu.pending, io)
		}
		n++
	}
	p.mu.staged = append(p.mu.staged[:0], p.mu.staged[n:]...)
}

// Init sets the unresolved intents as of applied index, and replays the
// ops flushed meanwhile above it.
func (p *Processor) Init(index uint64, intents []Intent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.initialized {
		panic("changefeed: processor initialized twice")
	}
	for _, in := range intents {
		p.addIntentLocked(in.Key, in.StartTs, in.HeartbeatKey)
	}
	p.mu.initialized, p.mu.initIndex = true, index
	for _, io := range p.mu.pending {
		if io.index > index {
			p.applyLocked(io)
		}
	}
	p.mu.pending = nil
	p.publishLocked()
}

func (p *Processor) applyLocked(io indexedOps) {
	for _, op := range io.ops {
		switch op.Kind {
		case OpIntent:
			p.addIntentLocked(op.Key, op.Ts, op.HeartbeatKey)
		case OpIntentGone:
			p.removeIntentLocked(op.Key)
		case OpValue:
			ev := Event{Key: op.Key, Value: op.Value, Deleted: op.Deleted, Ts: op.Ts}
			for r := range p.mu.regs {
				if io.index > r.afterIndex && op.Ts > r.fromTs && r.contains(op.Key) {
					if !r.push(ev, &p.opts) {
						delete(p.mu.regs, r)
					}
				}
			}
		}
	}
}

func (p *Processor) addIntentLocked(key []byte, start uint64, hb []byte) {
	if old, ok := p.mu.intents[string(key)]; ok {
		if old == start {
			return // the transaction rewrote its own intent
		}
		p.removeIntentLocked(key) // storage replaced it: the other is gone
	}
	p.mu.intents[string(key)] = start
	t := p.mu.txns[start]
	if t == nil {
		t = &txnIntents{key: key, heartbeatKey: hb}
		p.mu.txns[start] = t
	}
	t.count++
}

func (p *Processor) removeIntentLocked(key []byte) {
	start, ok := p.mu.intents[string(key)]
	if !ok {
		return
	}
	delete(p.mu.intents, string(key))
	t := p.mu.txns[start]
	t.count--
	if t.count == 0 {
		delete(p.mu.txns, start)
	} else if string(t.key) == string(key) {
		for k, s := range p.mu.intents {
			if s == start {
				t.key = []byte(k)
				break
			}
		}
	}
}

// SetClosed raises the closed timestamp to ts (never lowers it) and
// publishes the resolved timestamp if it moved.
func (p *Processor) SetClosed(ts uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ts > p.mu.closed {
		p.mu.closed = ts
	}
	p.publishLocked()
}

// oldestLocked returns the unresolved intent with the smallest start_ts.
func (p *Processor) oldestLocked() *Intent {
	var min uint64
	for s := range p.mu.txns {
		if min == 0 || s < min {
			min = s
		}
	}
	if min == 0 {
		return nil
	}
	t := p.mu.txns[min]
	return &Intent{Key: t.key, StartTs: min, HeartbeatKey: t.heartbeatKey}
}

func (p *Processor) publishLocked() {
	if !p.mu.initialized || p.mu.stopped != nil {
		return
	}
	r := p.mu.closed
	var blocking *Intent
	if o := p.oldestLocked(); o != nil && o.StartTs-1 < r {
		r, blocking = o.StartTs-1, o
	}
	if r <= p.mu.resolved {
		if blocking != nil && p.mu.resolved > 0 {
			// Stuck behind an intent: say which, at every closed
			// timestamp, so that a watcher can push its transaction.
			for reg := range p.mu.regs {
				if !reg.push(Event{Resolved: max(p.mu.resolved, reg.fromTs), Blocking: blocking}, &p.opts) {
					delete(p.mu.regs, reg)
				}
			}
		}
		return
	}
	p.mu.resolved = r
	for reg := range p.mu.regs {
		if !reg.push(Event{Resolved: max(r, reg.fromTs), Blocking: blocking}, &p.opts) {
			delete(p.mu.regs, reg)
		}
	}
}

// Resolved returns the last published resolved timestamp and the closed
// timestamp (for status and tests).
func (p *Processor) Resolved() (resolved, closed uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.resolved, p.mu.closed
}

// Oldest returns the unresolved intent with the smallest start
// timestamp, or nil (for status and tests).
func (p *Processor) Oldest() *Intent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.oldestLocked()
}

// Intents returns the number of unresolved intents the processor follows.
func (p *Processor) Intents() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.mu.intents)
}

// Locked runs fn with the processor locked: no Flush runs meanwhile. The
// host takes the engine snapshot of a registration's catch-up scan in it.
func (p *Processor) Locked(fn func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn()
}

// RegisterLocked adds a watcher of [start, end) (end empty: to the range's
// end) for changes above fromTs, whose catch-up scan reads a snapshot at
// applied index afterIndex. Call it inside Locked, right after taking that
// snapshot, after Init. The processor's error if it is stopped;
// ErrTooManyWatchers; ErrNotInitialized before Init, or if afterIndex is
// below Init's index (the snapshot is older than the processor's start:
// the commands in between would be in neither).
func (p *Processor) RegisterLocked(start, end []byte, fromTs, afterIndex uint64) (*Registration, error) {
	if p.mu.stopped != nil {
		return nil, p.mu.stopped
	}
	if !p.mu.initialized || afterIndex < p.mu.initIndex {
		return nil, ErrNotInitialized
	}
	if len(p.mu.regs) >= p.opts.RegistrationsMax {
		return nil, ErrTooManyWatchers
	}
	r := &Registration{p: p, start: start, end: end, fromTs: fromTs, afterIndex: afterIndex, signal: make(chan struct{}, 1)}
	p.mu.regs[r] = struct{}{}
	if p.mu.initialized && p.mu.resolved > 0 {
		r.push(Event{Resolved: max(p.mu.resolved, fromTs)}, &p.opts)
	}
	return r, nil
}

func (p *Processor) unregister(r *Registration) {
	p.mu.Lock()
	delete(p.mu.regs, r)
	p.mu.Unlock()
	r.mu.Lock()
	r.failLocked(errRegistrationClosed)
	r.mu.Unlock()
}

var errRegistrationClosed = errors.New("changefeed: registration closed")

// Registrations returns the number of live registrations.
func (p *Processor) Registrations() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.mu.regs)
}

// Stop ends every registration with err (after the events they buffered)
// and refuses new ones. Later calls do nothing.
func (p *Processor) Stop(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.stopped != nil {
		return
	}
	p.mu.stopped = err
	for r := range p.mu.regs {
		r.mu.Lock()
		if r.mu.err == nil {
			r.mu.err = err // buffered events are still delivered first
			r.wake()
		}
		r.mu.Unlock()
	}
	p.mu.regs = map[*Registration]struct{}{}
	p.mu.staged, p.mu.pending = nil, nil
}

// Stopped returns the error the processor was stopped with, nil if live.
func (p *Processor) Stopped() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.stopped
}
