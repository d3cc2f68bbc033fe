package tso

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
)

var (
	// ErrInvalidArgument is returned for a count of 0 or above
	// Options.AllocateCountMax, and by Options.Validate.
	ErrInvalidArgument = errors.New("tso: invalid argument")
	// ErrBoundContended is returned when a bound extension found the
	// persisted bound moved by someone else Options.CASAttemptsMax times in
	// a row: another oracle (a newer leader) is extending it. The caller is
	// most likely no longer the leader.
	ErrBoundContended = errors.New("tso: bound contended")
	// ErrExhausted is returned when a timestamp would not fit in 64 bits.
	ErrExhausted = errors.New("tso: timestamp space exhausted")
)

// Persister persists the oracle's upper bound with compare-and-set. The
// server implements it as a Raft write of keys.OracleBoundKey on range 1.
type Persister interface {
	// CASBound stores new if the stored bound equals expected, and returns
	// ok = true once that write is durable (a Raft entry committed and
	// applied). Otherwise it stores nothing and returns ok = false with the
	// stored bound in current. An absent bound is 0. An error means the
	// outcome is unknown: the write may or may not have happened.
	CASBound(ctx context.Context, expected, new uint64) (current uint64, ok bool, err error)
	// LoadBound returns the stored bound (0 if absent), current with every
	// CASBound that returned before it was called (a linearizable read).
	LoadBound(ctx context.Context) (uint64, error)
}

// Oracle hands out strictly increasing timestamps from an in-memory window
// below a persisted upper bound.
//
// Outline. A timestamp is max(last+1, physicalMillis<<LogicalBits), or
// last+1 for the requests served by a persist the clock outran. The
// Oracle hands out only timestamps below the bound it has itself won by a
// successful CASBound in the current epoch ("won"). When a request does
// not fit below won, one caller (the extender) persists a new bound,
// max(physical+BoundAhead, first+count+BoundAhead/16), with
// CASBound(won -> new); callers
// that arrive meanwhile wait for it and then allocate from the new window,
// so N concurrent requests cost one persist, not N (batching). After Reset
// (leadership gained or lost) nothing is won: the next extender first loads
// the stored bound L, raises last to L, so every later timestamp is > L,
// and then CASes L -> new.
//
// Why timestamps strictly increase across leaders (I4): see the package
// documentation.
//
// Rejected: persisting every allocation (one Raft write per timestamp;
// batching through the window makes it one per BoundAhead at low load), and
// a background goroutine that keeps the bound ahead of the clock (it would
// need its own clock and scheduling; here extension is driven by requests,
// which keeps the core deterministic and testable step by step; a server
// that wants pre-extension can call Allocate ahead of need).
type Oracle struct {
	opts Options
	p    Persister
	// aheadTs is BoundAhead in timestamp units (whole milliseconds shifted
	// by LogicalBits).
	aheadTs uint64
	// windowMinTs is the least a new bound reaches past the request that
	// asked for it: aheadTs/16, at least 1.
	windowMinTs uint64

	mu struct {
		sync.Mutex
		// epoch is incremented by Reset. A LoadBound or CASBound started in
		// an older epoch changes nothing when it returns.
		epoch uint64
		// loaded reports that seen holds the stored bound as last read or
		// written by this oracle in this epoch.
		loaded bool
		// seen is the stored bound as this oracle last knew it: the expected
		// value of its next CASBound. Meaningful only if loaded.
		seen uint64
		// won is the bound this oracle won by CASBound in this epoch, 0 if
		// none. Every timestamp handed out from the window is < won.
		// Invariants: won == 0 || (loaded && seen == won && last < won);
		// loaded && won == 0 implies last >= seen, so the next bound CASed
		// from seen is above seen.
		won uint64
		// last is the largest timestamp handed out, or a floor below which
		// none may be (a bound loaded or found by a failed CAS). It never
		// decreases, not even across Reset.
		last uint64
		// extending is non-nil while one caller runs LoadBound/CASBound.
		// Invariant: at most one extension is in flight per Oracle.
		extending *extension
		// waiting counts callers blocked on extending (for metrics and tests).
		waiting int
	}
}

// New returns an Oracle that persists its bound with p. Nothing is won: the
// first Allocate loads the bound. It panics if opts, with defaults filled
// in, do not pass Options.Validate (check them at start-up).
func New(opts Options, p Persister) *Oracle {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	if p == nil {
		panic("tso: nil Persister")
	}
	aheadTs := uint64(opts.BoundAhead.Milliseconds()) << opts.LogicalBits
	return &Oracle{
		opts:        opts,
		p:           p,
		aheadTs:     aheadTs,
		windowMinTs: max(aheadTs/windowMinDivisor, 1),
	}
}

// Reset forgets the won bound. The server calls it whenever leadership of
// the oracle's range is gained or lost. The next Allocate loads the stored
// bound and CASes past it before it allocates. An extension in flight
// during Reset completes but its result is ignored. Timestamps this Oracle
// handed out before Reset still bound later ones from below.
func (o *Oracle) Reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.mu.epoch++
	o.mu.loaded = false
	o.mu.won = 0
}

// Allocate returns first, the first of count timestamps first, first+1, ...,
// first+count-1. They are greater than every timestamp this Oracle returned
// before, and below the bound it won via CASBound (never a bound won by
// another Oracle). Concurrent calls that need a new bound share one
// CASBound.
//
// Errors: ErrInvalidArgument (count is 0 or above AllocateCountMax), the
// context's error, a Persister error (wrapped; the oracle stays usable),
// ErrBoundContended, ErrExhausted. A call that waited for another call's
// extension fails with that extension's error (unless it was the other
// call's context ending). On error no timestamp is handed out.
//
// The caller (the server) must confirm that it is still the leader (Raft
// ReadIndex) after Allocate returns and before it hands the timestamps to
// anyone; see the package documentation.
func (o *Oracle) Allocate(ctx context.Context, count uint32) (first uint64, err error) {
	defer func() { o.opts.Metrics.allocated(count, err) }()
	if count == 0 || count > o.opts.AllocateCountMax {
		return 0, fmt.Errorf("%w: count %d not in [1, %d]", ErrInvalidArgument, count, o.opts.AllocateCountMax)
	}
	waited := false // for an extension by another call
	for {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("tso: allocate: %w", err)
		}
		physTs, err := o.physicalTs()
		if err != nil {
			return 0, err
		}
		o.mu.Lock()
		if o.mu.won != 0 {
			first, err := nextFirst(o.mu.last, physTs, count)
			if err != nil {
				o.mu.Unlock()
				return 0, err
			}
			if first+uint64(count) <= o.mu.won { // no overflow: checked by nextFirst
				o.mu.last = first + uint64(count) - 1
				o.mu.Unlock()
				return first, nil
			}
			if waited && o.mu.last+1+uint64(count) <= o.mu.won { // no overflow: first >= last+1
				// The clock passed the window while this call waited for
				// the extension (a persist slower than BoundAhead): take the
				// window's next timestamps, below the clock, rather than
				// run a persist of its own after the others' (each as slow:
				// at worst one per waiter, in turn).
				first = o.mu.last + 1
				o.mu.last = first + uint64(count) - 1
				o.mu.Unlock()
				return first, nil
			}
		}
		if ext := o.mu.extending; ext != nil {
			// Someone is extending: wait for it, then try the new window.
			o.mu.waiting++
			o.mu.Unlock()
			var batchErr error
			select {
			case <-ext.done:
				// If the persist this call was batched on failed, fail with it
				// rather than have every waiter retry against a persister
				// that is down.
				batchErr = ext.err
			case <-ctx.Done(): // checked at the top of the loop
			}
			o.mu.Lock()
			o.mu.waiting--
			o.mu.Unlock()
			if batchErr != nil {
				return 0, batchErr
			}
			waited = true
			continue
		}
		ext := &extension{done: make(chan struct{})}
		o.mu.extending = ext
		epoch := o.mu.epoch
		o.mu.Unlock()

		first, got, err := o.extend(ctx, epoch, count)

		o.mu.Lock()
		o.mu.extending = nil
		o.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			// Shared with the waiters, unless the failure is this caller's
			// context ending: that is not theirs, and they retry.
			ext.err = err
		}
		close(ext.done) // publishes ext.err to the waiters
		if err != nil {
			return 0, err
		}
		if got {
			return first, nil
		}
	}
}

// extension is one LoadBound/CASBound run by one caller for all.
type extension struct {
	done chan struct{} // closed when the extension ends
	err  error         // its failure to share; written before done is closed, read after
}

// extend loads the bound if this epoch has not, then CASes it to
// targetBound. It runs with mu.extending set by
// the caller, so no other extension runs. It returns nil when it won a
// bound or when Reset started a new epoch; got says whether the request was
// served from the won bound (first is then its first timestamp; otherwise,
// a new epoch or a request that fits after all, the caller tries again).
func (o *Oracle) extend(ctx context.Context, epoch uint64, count uint32) (first uint64, got bool, err error) {
	o.mu.Lock()
	loaded := o.mu.loaded
	o.mu.Unlock()
	if !loaded {
		bound, err := o.p.LoadBound(ctx)
		if err != nil {
			return 0, false, fmt.Errorf("tso: load bound: %w", err)
		}
		o.mu.Lock()
		if o.mu.epoch != epoch {
			o.mu.Unlock()
			return 0, false, nil
		}
		o.raiseFloorLocked(bound)
		o.mu.Unlock()
	}
	for attempt := 1; ; attempt++ {
		var physTs uint64
		physTs, err = o.physicalTs()
		if err != nil {
			return 0, false, err
		}
		o.mu.Lock()
		if o.mu.epoch != epoch {
			o.mu.Unlock()
			return 0, false, nil
		}
		expected := o.mu.seen
		first, err = nextFirst(o.mu.last, physTs, count)
		if err != nil {
			o.mu.Unlock()
			return 0, false, err
		}
		if o.mu.won != 0 && first+uint64(count) <= o.mu.won {
			// The request fits after all (the clock went back since the
			// caller looked): no persist needed, let the caller retry.
			o.mu.Unlock()
			return 0, false, nil
		}
		if o.mu.won != 0 {
			// Start past the current window, not in its tail: callers
			// that fit below won use that tail while the CAS is in flight,
			// and would otherwise push this request out of a new window
			// sized for it (round after round, when the window is only
			// windowMinTs past the request). At most count-1 timestamps
			// go unused.
			first = max(first, o.mu.won)
		}
		var target uint64
		target, err = o.targetBound(physTs, first, count)
		if err != nil {
			o.mu.Unlock()
			return 0, false, err
		}
		if target <= expected || first <= o.mu.last {
			panic(fmt.Sprintf("tso: new bound %d not above stored bound %d or first %d not above last %d",
				target, expected, first, o.mu.last))
		}
		o.mu.Unlock()

		var current uint64
		var ok bool
		current, ok, err = o.p.CASBound(ctx, expected, target)
		switch {
		case err != nil:
			o.opts.Metrics.extended("error")
		case ok:
			o.opts.Metrics.extended("won")
		default:
			o.opts.Metrics.extended("moved")
		}
		if err != nil {
			// Unknown outcome. If the CAS happened, the next one from
			// expected fails and the failure path below catches up.
			return 0, false, fmt.Errorf("tso: extend bound %d -> %d: %w", expected, target, err)
		}
		o.mu.Lock()
		if o.mu.epoch != epoch {
			o.mu.Unlock()
			return 0, false, nil
		}
		if ok {
			o.mu.seen, o.mu.won = target, target
			// The request that ran the extension is served from the new
			// window at once, even if the clock has meanwhile passed the
			// bound (a persist slower than BoundAhead): every extension
			// serves at least its own request, so Allocate cannot livelock.
			// first is still free: it starts at or past the old window,
			// and meanwhile other calls took only timestamps below that
			// window's bound; targetBound left room for count.
			if first <= o.mu.last {
				panic(fmt.Sprintf("tso: first %d of a won window not above last %d", first, o.mu.last))
			}
			o.mu.last = first + uint64(count) - 1
			o.mu.Unlock()
			return first, true, nil
		}
		// Another oracle moved the bound: whatever window we had may now
		// overlap its timestamps' order, so give it up and start above.
		o.raiseFloorLocked(current)
		o.mu.Unlock()
		if attempt >= o.opts.CASAttemptsMax {
			return 0, false, fmt.Errorf("%w: bound moved by another oracle %d times, last to %d", ErrBoundContended, attempt, current)
		}
	}
}

// windowMinDivisor sets the least window a new bound opens past the request
// that needs it, as a fraction of BoundAhead.
const windowMinDivisor = 16

// targetBound is the bound an extension CASes to, for a request of count
// timestamps from first, with the clock at physTs:
// max(physTs+aheadTs, first+count+windowMinTs).
//
// The first term keeps the bound BoundAhead past the clock, so at low load
// one persist serves BoundAhead of wall time. It is measured from the clock,
// not from first: after a host change first is just above the stored bound,
// itself up to BoundAhead past the clock, and a bound BoundAhead past first
// would move the next host's start another BoundAhead ahead, so quick host
// changes (a whole-cluster restart) would ratchet the timestamps ever
// further ahead of the wall clock. The second term is the least window past
// the request, so that timestamps running ahead of the clock (after a host
// change, or more than 2^LogicalBits requests in a millisecond) cost one
// persist per windowMinTs timestamps, not one per request.
//
// Hence a new host's first timestamp is at most BoundAhead ahead of its
// clock, unless two host changes come within BoundAhead/16 of wall time of
// each other or timestamps outrun the clock by themselves.
func (o *Oracle) targetBound(physTs, first uint64, count uint32) (uint64, error) {
	need := first + uint64(count) // no overflow: checked by nextFirst
	if need > math.MaxUint64-o.windowMinTs {
		return 0, ErrExhausted
	}
	target := need + o.windowMinTs
	if physTs <= math.MaxUint64-o.aheadTs {
		target = max(target, physTs+o.aheadTs)
	}
	return target, nil
}

// raiseFloorLocked records that the stored bound is bound and that this
// oracle has no window: every later timestamp will be > bound.
func (o *Oracle) raiseFloorLocked(bound uint64) {
	o.mu.loaded = true
	o.mu.seen = bound
	o.mu.won = 0
	o.mu.last = max(o.mu.last, bound)
}

// nextFirst returns max(last+1, physTs), checking that first+count fits in
// 64 bits.
func nextFirst(last, physTs uint64, count uint32) (uint64, error) {
	if last == math.MaxUint64 {
		return 0, ErrExhausted
	}
	first := max(last+1, physTs)
	if first > math.MaxUint64-uint64(count) {
		return 0, ErrExhausted
	}
	return first, nil
}

// physicalTs is the clock's milliseconds since the Unix epoch shifted by
// LogicalBits; a clock before 1970 counts as 0.
func (o *Oracle) physicalTs() (uint64, error) {
	ms := o.opts.Clock().UnixMilli()
	if ms < 0 {
		return 0, nil
	}
	if uint64(ms) > math.MaxUint64>>o.opts.LogicalBits {
		return 0, fmt.Errorf("%w: clock at %d ms", ErrExhausted, ms)
	}
	return uint64(ms) << o.opts.LogicalBits, nil
}
