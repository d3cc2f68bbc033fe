package tso

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a settable clock; if stepMs != 0 every reading advances it.
type fakeClock struct {
	ms     atomic.Int64
	stepMs int64
}

func newClock(ms int64) *fakeClock { c := &fakeClock{}; c.ms.Store(ms); return c }

func (c *fakeClock) now() time.Time { return time.UnixMilli(c.ms.Add(c.stepMs) - c.stepMs) }
func (c *fakeClock) set(ms int64)   { c.ms.Store(ms) }

// 2025-11-22 in milliseconds: timestamps of realistic size.
const nowMs = 1_763_776_000_000

// testPersister wraps a MemPersister, counts calls, and can hold CASBound
// at a gate and inject failures.
type testPersister struct {
	mem   MemPersister
	cas   atomic.Int64
	loads atomic.Int64
	// gate, if non-nil, holds every CASBound until a value is received or
	// the context ends; entered gets a value when a CASBound reaches the gate.
	gate    chan struct{}
	entered chan struct{}
	// hook, if set, runs before each CASBound (after the gate); a non-nil
	// result is returned instead of the normal one.
	hook func(expected, new uint64) (uint64, bool, error, bool)
}

func (p *testPersister) CASBound(ctx context.Context, expected, new uint64) (uint64, bool, error) {
	p.cas.Add(1)
	if p.gate != nil {
		p.entered <- struct{}{}
		select {
		case <-p.gate:
		case <-ctx.Done():
			return 0, false, ctx.Err()
		}
	}
	if p.hook != nil {
		if cur, ok, err, done := p.hook(expected, new); done {
			return cur, ok, err
		}
	}
	return p.mem.CASBound(ctx, expected, new)
}

func (p *testPersister) LoadBound(ctx context.Context) (uint64, error) {
	p.loads.Add(1)
	return p.mem.LoadBound(ctx)
}

func gated() *testPersister {
	return &testPersister{gate: make(chan struct{}), entered: make(chan struct{}, 1000)}
}

func mustAllocate(t testing.TB, o *Oracle, count uint32) uint64 {
	t.Helper()
	first, err := o.Allocate(context.Background(), count)
	if err != nil {
		t.Fatalf("Allocate(%d): %v", count, err)
	}
	return first
}

// waitFor spins (yielding, not sleeping) until cond holds. It is
// synchronisation, not a timing assertion: the test deadline bounds it.
func waitFor(cond func() bool) {
	for !cond() {
		runtime.Gosched()
	}
}

type span struct{ first, count uint64 }

// checkDisjoint fails if any two spans share a timestamp.
func checkDisjoint(t *testing.T, spans []span) {
	t.Helper()
	slices.SortFunc(spans, func(a, b span) int {
		switch {
		case a.first < b.first:
			return -1
		case a.first > b.first:
			return 1
		}
		return 0
	})
	for i := 1; i < len(spans); i++ {
		if prev := spans[i-1]; prev.first+prev.count > spans[i].first {
			t.Fatalf("spans %v and %v overlap", prev, spans[i])
		}
	}
}

func TestAllocateConcurrentStrictlyIncreasing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stepMs int64
		opts   Options
	}{
		{"fixed clock, defaults", 0, Options{}},
		{"fixed clock, tiny window", 0, Options{BoundAhead: time.Millisecond, LogicalBits: 4}},
		{"advancing clock, tiny window", 1, Options{BoundAhead: time.Millisecond, LogicalBits: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newClock(nowMs)
			clock.stepMs = tc.stepMs
			tc.opts.Clock = clock.now
			o := New(tc.opts, &MemPersister{})
			const goroutines, perGoroutine = 16, 300
			results := make([][]span, goroutines)
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for range perGoroutine {
						count := uint32(rng.IntN(5) + 1)
						first, err := o.Allocate(context.Background(), count)
						if err != nil {
							t.Errorf("Allocate: %v", err)
							return
						}
						results[g] = append(results[g], span{first, uint64(count)})
					}
				})
			}
			wg.Wait()
			var all []span
			for g, spans := range results {
				for i := 1; i < len(spans); i++ {
					if spans[i].first <= spans[i-1].first+spans[i-1].count-1 {
						t.Fatalf("goroutine %d: span %v after %v", g, spans[i], spans[i-1])
					}
				}
				all = append(all, spans...)
			}
			if len(all) != goroutines*perGoroutine {
				t.Fatalf("%d spans", len(all))
			}
			checkDisjoint(t, all)
		})
	}
}

func TestTimestampShape(t *testing.T) {
	clock := newClock(nowMs)
	o := New(Options{Clock: clock.now}, &MemPersister{})
	first := mustAllocate(t, o, 3)
	if first != nowMs<<18 {
		t.Errorf("first timestamp %d, want physical %d << 18", first, int64(nowMs))
	}
	if next := mustAllocate(t, o, 1); next != first+3 {
		t.Errorf("next timestamp %d, want %d", next, first+3)
	}
	clock.set(nowMs + 5)
	if next := mustAllocate(t, o, 1); next != (nowMs+5)<<18 {
		t.Errorf("after the clock advanced: %d, want %d", next, (nowMs+5)<<18)
	}
	// BoundAhead past the clock at the first extension, not past the request.
	if won := o.wonForTest(); won != first+uint64(DefaultBoundAhead.Milliseconds())<<18 {
		t.Errorf("won bound %d, want %d", won, first+uint64(DefaultBoundAhead.Milliseconds())<<18)
	}
}

// The clock goes backwards, across Reset and across a restart (a new
// Oracle on the same persisted bound): timestamps still strictly increase.
func TestMonotonicAcrossResetWithBackwardsClock(t *testing.T) {
	clock := newClock(nowMs)
	p := &testPersister{}
	o := New(Options{Clock: clock.now, BoundAhead: 10 * time.Millisecond}, p)
	last := mustAllocate(t, o, 10) + 9
	for i, backMs := range []int64{10_000, 1, 3_600_000, 0} {
		clock.set(clock.ms.Load() - backMs)
		o.Reset()
		first := mustAllocate(t, o, 1)
		if first <= last {
			t.Fatalf("step %d: after Reset with the clock %dms back: %d <= %d", i, backMs, first, last)
		}
		last = first
		if i == 1 {
			// A restart forgets "last"; the persisted bound still orders it.
			o = New(Options{Clock: clock.now, BoundAhead: 10 * time.Millisecond}, p)
		}
	}
	if got := p.loads.Load(); got != 5 {
		t.Errorf("%d loads, want one per New or Reset (5)", got)
	}
}

// Simulated failover: A allocates, B takes over (Reset on gaining
// leadership), then every B timestamp is above every A timestamp
// allocated before B's first. A, deposed but unaware, still allocates
// below its won bound (which is why the server confirms leadership with
// ReadIndex before replying); once A must extend, its CAS fails and it
// jumps above the bound B persisted.
func TestFailoverTwoOracles(t *testing.T) {
	clockA, clockB := newClock(nowMs), newClock(nowMs-60_000) // B's clock is a minute behind
	shared := &MemPersister{}
	a := New(Options{Clock: clockA.now, BoundAhead: 5 * time.Millisecond}, shared)
	var fromA []uint64
	for range 100 {
		fromA = append(fromA, mustAllocate(t, a, 1))
	}
	maxA := slices.Max(fromA)

	b := New(Options{Clock: clockB.now, BoundAhead: 5 * time.Millisecond}, shared)
	b.Reset() // as the server does on gaining leadership
	bFirst := mustAllocate(t, b, 1)
	if bFirst <= maxA {
		t.Fatalf("B's first %d is not above A's last %d", bFirst, maxA)
	}
	fromB := []uint64{bFirst}
	for range 100 {
		fromB = append(fromB, mustAllocate(t, b, 1))
	}
	for _, ts := range fromB {
		if ts <= maxA {
			t.Fatalf("B timestamp %d <= A timestamp %d", ts, maxA)
		}
	}
	// Deposed A still allocates inside its old window: below B's first, so
	// unique, but out of real-time order; the server's ReadIndex drops these.
	stale := mustAllocate(t, a, 1)
	if stale >= bFirst {
		t.Fatalf("stale A timestamp %d is not below its won bound (B's first %d)", stale, bFirst)
	}
	// A's clock passes its window, so A must extend: its CAS fails, it
	// reloads, and every timestamp after that is above the bound B had
	// persisted.
	bBound, _ := shared.LoadBound(context.Background())
	clockA.set(nowMs + 1_000)
	if next := mustAllocate(t, a, 1); next <= bBound {
		t.Fatalf("A after a failed CAS: %d <= stored bound %d", next, bBound)
	}
	// And B, whose bound A has now moved, jumps above A's when it extends.
	aBound, _ := shared.LoadBound(context.Background())
	if aBound == bBound {
		t.Fatal("A did not extend")
	}
	clockB.set(nowMs + 1_000)
	if nb := mustAllocate(t, b, 1); nb <= aBound {
		t.Fatalf("B after a failed CAS: %d <= stored bound %d", nb, aBound)
	}
}

// N concurrent Allocates that all need a new bound cost one CASBound.
func TestBatchingCoalescesExtensions(t *testing.T) {
	clock := newClock(nowMs)
	p := gated()
	o := New(Options{Clock: clock.now}, p)
	const n = 64
	firsts := make([]uint64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { firsts[i] = mustAllocate(t, o, 1) })
	}
	<-p.entered                                               // one caller is extending...
	waitFor(func() bool { return o.waitingForTest() == n-1 }) // ...and all others wait for it
	close(p.gate)
	wg.Wait()
	if got := p.cas.Load(); got != 1 {
		t.Errorf("%d concurrent Allocates made %d CASBound calls, want 1", n, got)
	}
	if got := p.loads.Load(); got != 1 {
		t.Errorf("%d LoadBound calls, want 1", got)
	}
	slices.Sort(firsts)
	if len(slices.Compact(firsts)) != n {
		t.Errorf("duplicate timestamps")
	}
	// With the clock still, the window serves many more without a persist.
	for range 1000 {
		mustAllocate(t, o, 1)
	}
	if got := p.cas.Load(); got != 1 {
		t.Errorf("%d CASBound calls after 1000 more Allocates, want 1", got)
	}
}

// When the demand exceeds one window, each persist still serves a window of
// at least BoundAhead: CAS calls <= 1 + total timestamps / BoundAhead.
// Timestamps run ahead of a stopped clock: the first bound is BoundAhead
// past the clock, and each later one at least BoundAhead/16 past the
// request that needs it, so each persist still serves many requests.
func TestBatchingAheadOfTheClock(t *testing.T) {
	clock := newClock(nowMs)
	p := &testPersister{}
	// 256 timestamps per ms: BoundAhead is 4,096 timestamps, the least
	// window 256.
	o := New(Options{Clock: clock.now, BoundAhead: 16 * time.Millisecond, LogicalBits: 8}, p)
	const n, count = 512, 16
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { mustAllocate(t, o, count) })
	}
	wg.Wait()
	if got, limit := p.cas.Load(), int64(2+(n*count-4096)/256); got > limit {
		t.Errorf("%d CASBound calls for %d timestamps, want <= %d", got, n*count, limit)
	}
}

func TestContextCancellation(t *testing.T) {
	t.Run("already cancelled", func(t *testing.T) {
		p := &testPersister{}
		o := New(Options{Clock: newClock(nowMs).now}, p)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := o.Allocate(ctx, 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("Allocate: %v, want context.Canceled", err)
		}
		if p.cas.Load()+p.loads.Load() != 0 {
			t.Fatal("a cancelled Allocate called the persister")
		}
	})
	t.Run("extender cancelled during CAS", func(t *testing.T) {
		p := gated()
		o := New(Options{Clock: newClock(nowMs).now}, p)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error)
		go func() { _, err := o.Allocate(ctx, 1); errc <- err }()
		<-p.entered
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Allocate: %v, want context.Canceled", err)
		}
		close(p.gate)
		mustAllocate(t, o, 1) // usable afterwards
	})
	t.Run("waiter cancelled while another extends", func(t *testing.T) {
		p := gated()
		o := New(Options{Clock: newClock(nowMs).now}, p)
		extender := make(chan uint64)
		go func() { extender <- mustAllocate(t, o, 1) }()
		<-p.entered
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error)
		go func() { _, err := o.Allocate(ctx, 1); errc <- err }()
		waitFor(func() bool { return o.waitingForTest() == 1 })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter: %v, want context.Canceled", err)
		}
		close(p.gate) // the extension was not disturbed
		<-extender
		if got := p.cas.Load(); got != 1 {
			t.Fatalf("%d CASBound calls, want 1", got)
		}
	})
}

func TestBoundContended(t *testing.T) {
	p := &testPersister{}
	// An adversary moves the bound before every CAS lands.
	var moved atomic.Uint64
	p.hook = func(expected, _ uint64) (uint64, bool, error, bool) {
		cur := expected + 1_000_000
		moved.Store(cur)
		_, _, _ = p.mem.CASBound(context.Background(), expected, cur)
		return cur, false, nil, true
	}
	o := New(Options{Clock: newClock(nowMs).now, CASAttemptsMax: 4}, p)
	if _, err := o.Allocate(context.Background(), 1); !errors.Is(err, ErrBoundContended) {
		t.Fatalf("Allocate: %v, want ErrBoundContended", err)
	}
	if got := p.cas.Load(); got != 4 {
		t.Fatalf("%d CAS attempts, want CASAttemptsMax = 4", got)
	}
	p.hook = nil
	if first := mustAllocate(t, o, 1); first <= moved.Load() {
		t.Fatalf("after contention: %d <= bound %d seen on failure", first, moved.Load())
	}
}

// A CASBound that applied but reported an error (unknown outcome): the
// oracle stays safe and usable.
func TestAmbiguousCAS(t *testing.T) {
	clock := newClock(nowMs)
	p := &testPersister{}
	o := New(Options{Clock: clock.now, BoundAhead: time.Millisecond}, p)
	mustAllocate(t, o, 1)
	errUnknown := errors.New("raft: proposal dropped")
	var applied uint64
	p.hook = func(expected, new uint64) (uint64, bool, error, bool) {
		_, _, _ = p.mem.CASBound(context.Background(), expected, new)
		applied = new
		return 0, false, errUnknown, true
	}
	clock.set(nowMs + 10) // beyond the window: forces an extension
	if _, err := o.Allocate(context.Background(), 1); !errors.Is(err, errUnknown) {
		t.Fatalf("Allocate: %v, want the persister's error", err)
	}
	p.hook = nil
	clock.set(nowMs + 20)
	if first := mustAllocate(t, o, 1); first <= applied {
		t.Fatalf("after an ambiguous CAS: %d <= applied bound %d", first, applied)
	}
}

// Reset while a CASBound is in flight: its result is not used; the oracle
// loads the bound again.
func TestResetDuringExtension(t *testing.T) {
	p := gated()
	o := New(Options{Clock: newClock(nowMs).now}, p)
	done := make(chan uint64)
	go func() { done <- mustAllocate(t, o, 1) }()
	<-p.entered
	o.Reset()
	p.gate <- struct{}{} // the first CAS lands; its epoch is gone
	<-p.entered          // so the oracle loads again and CASes again
	won, _ := p.mem.LoadBound(context.Background())
	close(p.gate)
	first := <-done
	if first <= won {
		t.Fatalf("first %d <= bound %d won before Reset", first, won)
	}
	if p.loads.Load() != 2 || p.cas.Load() != 2 {
		t.Fatalf("loads %d, CAS %d; want 2 and 2", p.loads.Load(), p.cas.Load())
	}
}

func TestInvalidArguments(t *testing.T) {
	o := New(Options{Clock: newClock(nowMs).now, AllocateCountMax: 10}, &MemPersister{})
	for _, count := range []uint32{0, 11} {
		if _, err := o.Allocate(context.Background(), count); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Allocate(%d): %v, want ErrInvalidArgument", count, err)
		}
	}
	for _, opts := range []Options{
		{BoundAhead: time.Microsecond},
		{BoundAhead: 2 * time.Hour},
		{LogicalBits: 23},
		{CASAttemptsMax: -1},
	} {
		opts.EnsureDefaults()
		if err := opts.Validate(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Validate(%+v): %v", opts, err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New(%+v) did not panic", opts)
				}
			}()
			New(opts, &MemPersister{})
		}()
	}
}

// A seeded random history of leadership changes with skewed, jumping clocks.
// The server's contract is modelled: the leader's timestamps are "confirmed"
// (ReadIndex succeeds); a deposed oracle may still be asked (a request in
// flight) and may even steal the bound, but its timestamps are dropped.
// Confirmed timestamps must strictly increase (I4); all must be distinct.
func TestRandomizedFailoverHistory(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	for run := range uint64(20) {
		seed := seed + run
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			shared := &MemPersister{}
			var clocks []*fakeClock
			var oracles []*Oracle
			for i := range 3 {
				c := newClock(nowMs + int64(rng.IntN(10_000)) - 5_000)
				clocks = append(clocks, c)
				oracles = append(oracles, New(Options{
					Clock:       c.now,
					BoundAhead:  time.Duration(1+rng.IntN(50)) * time.Millisecond,
					LogicalBits: uint(4 + i*4),
				}, shared))
			}
			leader := 0
			var confirmed uint64
			var all []span
			for step := range 2000 {
				switch r := rng.IntN(100); {
				case r < 5: // leadership moves
					next := rng.IntN(len(oracles))
					oracles[leader].Reset()
					oracles[next].Reset()
					leader = next
				case r < 15: // a clock jumps, often backwards
					c := clocks[rng.IntN(len(clocks))]
					c.set(c.ms.Load() + int64(rng.IntN(200)) - 150)
				case r < 25: // a deposed oracle serves a request in flight
					i := rng.IntN(len(oracles))
					if i == leader {
						continue
					}
					count := uint32(1 + rng.IntN(300))
					first, err := oracles[i].Allocate(context.Background(), count)
					if err == nil {
						all = append(all, span{first, uint64(count)})
					} else if !errors.Is(err, ErrBoundContended) {
						t.Fatalf("seed %d step %d: %v", seed, step, err)
					}
				default:
					count := uint32(1 + rng.IntN(300))
					first, err := oracles[leader].Allocate(context.Background(), count)
					if errors.Is(err, ErrBoundContended) {
						continue // the server returns "unavailable"; the client retries
					}
					if err != nil {
						t.Fatalf("seed %d step %d: %v", seed, step, err)
					}
					if first <= confirmed {
						t.Fatalf("seed %d step %d: leader %d handed out %d after confirmed %d", seed, step, leader, first, confirmed)
					}
					confirmed = first + uint64(count) - 1
					all = append(all, span{first, uint64(count)})
				}
			}
			checkDisjoint(t, all)
		})
	}
}

// The edges of the timestamp space: a clock before 1970 counts as 0; a
// stored bound at the top of the space is ErrExhausted, not a wrap-around.
func TestTimestampSpaceEdges(t *testing.T) {
	o := New(Options{Clock: newClock(-5_000).now}, &MemPersister{})
	if first := mustAllocate(t, o, 1); first != 1 {
		t.Errorf("first timestamp before 1970: %d, want 1 (above the absent bound 0)", first)
	}
	for _, bound := range []uint64{1<<64 - 1, 1<<64 - 2} {
		p := &MemPersister{}
		_, _, _ = p.CASBound(context.Background(), 0, bound)
		o := New(Options{Clock: newClock(nowMs).now}, p)
		if _, err := o.Allocate(context.Background(), 2); !errors.Is(err, ErrExhausted) {
			t.Errorf("bound %d: %v, want ErrExhausted", bound, err)
		}
	}
	errDown := errors.New("range 1 unavailable")
	o = New(Options{Clock: newClock(nowMs).now}, failingLoad{&MemPersister{}, errDown})
	if _, err := o.Allocate(context.Background(), 1); !errors.Is(err, errDown) {
		t.Errorf("LoadBound failure: %v", err)
	}
}

type failingLoad struct {
	Persister
	err error
}

func (f failingLoad) LoadBound(context.Context) (uint64, error) { return 0, f.err }

// Callers batched on a failed persist fail with it (one persist attempt,
// not one per caller); callers batched on an extension whose own caller
// gave up (context) retry and succeed.
func TestBatchedFailure(t *testing.T) {
	errDown := errors.New("range 1 unavailable")
	p := gated()
	p.hook = func(uint64, uint64) (uint64, bool, error, bool) { return 0, false, errDown, true }
	o := New(Options{Clock: newClock(nowMs).now}, p)
	const n = 16
	errs := make(chan error, n)
	for range n {
		go func() { _, err := o.Allocate(context.Background(), 1); errs <- err }()
	}
	<-p.entered
	waitFor(func() bool { return o.waitingForTest() == n-1 })
	p.gate <- struct{}{}
	for range n {
		if err := <-errs; !errors.Is(err, errDown) {
			t.Fatalf("Allocate: %v, want the persister's error", err)
		}
	}
	if got := p.cas.Load(); got != 1 {
		t.Fatalf("%d CASBound calls, want 1", got)
	}

	p.hook = nil
	ctx, cancel := context.WithCancel(context.Background())
	extender := make(chan error)
	go func() { _, err := o.Allocate(ctx, 1); extender <- err }()
	<-p.entered
	waiter := make(chan uint64)
	go func() { waiter <- mustAllocate(t, o, 1) }()
	waitFor(func() bool { return o.waitingForTest() == 1 })
	cancel()
	if err := <-extender; !errors.Is(err, context.Canceled) {
		t.Fatalf("extender: %v, want context.Canceled", err)
	}
	<-p.entered // the waiter extends in its turn
	p.gate <- struct{}{}
	<-waiter
}

// A persist slower than BoundAhead: when it returns the clock has passed
// the bound it won. The request that ran it is still served from the new
// window, so Allocate makes progress instead of extending forever.
func TestPersistSlowerThanBoundAhead(t *testing.T) {
	clock := newClock(nowMs)
	p := &testPersister{}
	p.hook = func(expected, new uint64) (uint64, bool, error, bool) {
		clock.ms.Add(10) // 10 ms per persist, BoundAhead is 2 ms
		return 0, false, nil, false
	}
	o := New(Options{Clock: clock.now, BoundAhead: 2 * time.Millisecond, LogicalBits: 4}, p)
	last := uint64(0)
	for range 100 {
		first := mustAllocate(t, o, 1)
		if first <= last {
			t.Fatalf("timestamp %d after %d", first, last)
		}
		last = first
	}
	if got := p.cas.Load(); got != 100 {
		t.Errorf("%d CASBound calls for 100 requests, want 100 (one each)", got)
	}
}

// While the extender's CAS is in flight, small requests use up the old
// window (fast path). Were the extender's request (count > windowMinTs) to
// start in that tail, it would no longer fit below the bound it won, and
// the same would happen every round: one Allocate would never return
// although every CAS succeeds. It starts past the old window instead.
func TestExtenderNotStarvedByFastPath(t *testing.T) {
	clock := newClock(nowMs) // stopped: timestamps run ahead of the clock
	p := &testPersister{}
	var o *Oracle
	var rounds atomic.Int64
	p.hook = func(expected, new uint64) (uint64, bool, error, bool) {
		if rounds.Add(1) > 1000 {
			return 0, false, nil, false // stop eating: let the test end
		}
		if o.wonForTest() == 0 {
			return 0, false, nil, false
		}
		// Use up the old window [last+1, expected) with 1-timestamp requests.
		o.mu.Lock()
		empty := o.mu.last+1 >= expected
		o.mu.Unlock()
		for !empty {
			ts, err := o.Allocate(context.Background(), 1)
			if err != nil {
				t.Errorf("small: %v", err)
				return 0, false, nil, false
			}
			if ts == expected-1 {
				return 0, false, nil, false
			}
		}
		return 0, false, nil, false
	}
	o = New(Options{Clock: clock.now, BoundAhead: time.Millisecond, LogicalBits: 4}, p) // aheadTs 16, windowMinTs 1
	mustAllocate(t, o, 1)                                                               // won = P+16
	rounds.Store(0)
	mustAllocate(t, o, 20)
	if got := p.cas.Load() - 1; got > 3 {
		t.Errorf("one Allocate(20) took %d CASBound calls (every one won)", got)
	}
}

// Several oracles share one persister; random Resets, clock jumps, gated
// slow CASes and concurrent Allocates. Every timestamp handed out must be
// unique, and each Oracle's must be below the bound stored at hand-out time.
func TestStressUniqueAcrossOracles(t *testing.T) {
	for seed := range 5 {
		mem := &MemPersister{}
		var mu sync.Mutex
		seen := map[uint64]bool{}
		const nOracles = 3
		oracles := make([]*Oracle, nOracles)
		clocks := make([]*fakeClock, nOracles)
		for i := range oracles {
			clocks[i] = newClock(nowMs + int64(i)*3)
			p := &slowPersister{mem: mem, rng: rand.New(rand.NewPCG(uint64(seed), uint64(i)))}
			oracles[i] = New(Options{Clock: clocks[i].now, BoundAhead: 16 * time.Millisecond, LogicalBits: 3, CASAttemptsMax: 5}, p)
		}
		var wg sync.WaitGroup
		for i := range oracles {
			for g := range 4 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(seed), uint64(i*10+g)))
					for range 100 {
						// Leadership changes and clock jumps between requests.
						switch rng.IntN(20) {
						case 0:
							oracles[i].Reset()
						case 1:
							clocks[i].ms.Add(int64(rng.IntN(5)) - 2)
						}
						count := uint32(rng.IntN(40) + 1)
						first, err := oracles[i].Allocate(context.Background(), count)
						if err != nil {
							if errors.Is(err, ErrBoundContended) {
								continue
							}
							t.Errorf("Allocate: %v", err)
							return
						}
						b, _ := mem.LoadBound(context.Background())
						if first+uint64(count) > b {
							t.Errorf("span [%d,+%d) not below stored bound %d", first, count, b)
						}
						mu.Lock()
						for k := range uint64(count) {
							if seen[first+k] {
								t.Errorf("timestamp %d handed out twice", first+k)
							}
							seen[first+k] = true
						}
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
	}
}

type slowPersister struct {
	mem *MemPersister
	mu  sync.Mutex
	rng *rand.Rand
}

func (p *slowPersister) CASBound(ctx context.Context, expected, new uint64) (uint64, bool, error) {
	p.mu.Lock()
	d := time.Duration(p.rng.IntN(200)) * time.Microsecond
	p.mu.Unlock()
	time.Sleep(d)
	return p.mem.CASBound(ctx, expected, new)
}
func (p *slowPersister) LoadBound(ctx context.Context) (uint64, error) { return p.mem.LoadBound(ctx) }

// A persist slower than BoundAhead with callers waiting on it: when it
// returns, the clock has passed the bound it won, and the waiters take
// their timestamps from the new window (below the clock) instead of each
// running a persist of its own, one after the other.
func TestSlowPersistServesItsWaiters(t *testing.T) {
	clock := newClock(nowMs)
	p := gated()
	o := New(Options{Clock: clock.now, BoundAhead: 2 * time.Millisecond, LogicalBits: 8}, p) // a window of 512
	const n = 50
	firsts := make(chan uint64, n)
	var wg sync.WaitGroup
	wg.Go(func() { firsts <- mustAllocate(t, o, 1) }) // the extender
	<-p.entered
	for range n - 1 {
		wg.Go(func() { firsts <- mustAllocate(t, o, 1) })
	}
	for o.waitingForTest() < n-1 {
		runtime.Gosched()
	}
	clock.ms.Add(10) // the persist took 10 ms: the clock is past the bound
	close(p.gate)
	wg.Wait()
	close(firsts)
	seen := map[uint64]bool{}
	for f := range firsts {
		if seen[f] {
			t.Fatalf("timestamp %d handed out twice", f)
		}
		seen[f] = true
	}
	if got := p.cas.Load(); got != 1 {
		t.Errorf("%d CASBound calls for %d waiting requests, want 1", got, n)
	}
}
