package replica

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// newLeaseGroup starts a group (quiescing if quiesce) on 100 ms ticks
// whose lease clock is a fakeClock, and returns it with the clock and the
// lease duration.
func newLeaseGroup(t *testing.T, quiesce bool) (*group, *fakeClock, time.Duration) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	var cfg Config
	g := newGroupOpts(t, 0, func(c *Config) {
		c.TickInterval = 100 * time.Millisecond
		c.Now = clock.Now
		cfg = *c
	}, quiesce)
	cfg.EnsureDefaults()
	return g, clock, cfg.LeaseDuration()
}

// TestLeaderLease checks the lease's bookkeeping against a clock that
// moves only when the test says: the lease runs LeaseDuration from the
// issue of the ReadIndex round that confirmed it, is renewed once half of
// it has passed, and ends when the leader starts a leadership transfer,
// after which the new leader takes its own.
func TestLeaderLease(t *testing.T) {
	g, clock, d := newLeaseGroup(t, false)
	if want := time.Duration(float64(9*100*time.Millisecond) * 0.9); d != want {
		t.Fatalf("LeaseDuration %v, want %v", d, want)
	}
	await := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("never: %s", what)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	l := g.leader()
	t0 := clock.Now()
	await("a lease from the first rounds", func() bool { return l.Status().LeaseValid(clock.Now()) })
	if st := l.Status(); !st.LeaseExpiry.Equal(t0.Add(d)) {
		t.Fatalf("lease expiry %v, want the round's issue time plus %v (%v)", st.LeaseExpiry, d, t0.Add(d))
	}
	// Past the expiry the lease is not valid until a renewal round issued
	// at the new time returns.
	clock.advance(d + time.Millisecond)
	t1 := clock.Now()
	if l.Status().LeaseValid(t1) {
		t.Fatalf("lease valid at %v, past its expiry %v", t1, l.Status().LeaseExpiry)
	}
	await("a renewed lease", func() bool { return l.Status().LeaseValid(clock.Now()) })
	if st := l.Status(); !st.LeaseExpiry.Equal(t1.Add(d)) {
		t.Fatalf("renewed lease expiry %v, want %v", st.LeaseExpiry, t1.Add(d))
	}
	// A leadership transfer ends the lease at once, in this term for good.
	var to uint64
	for id := uint64(1); id <= 3; id++ {
		if r := g.replica(id); r != l {
			to = id
			break
		}
	}
	term := l.Status().Term
	l.TransferLeader(to)
	await("the lease ended by the transfer", func() bool { st := l.Status(); return !st.LeaseValid(clock.Now()) || st.Term != term })
	deadline := time.Now().Add(30 * time.Second)
	for st := l.Status(); st.Term == term && st.IsLeader; st = l.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("the transfer to %d never completed", to)
		}
		if st.LeaseValid(clock.Now()) {
			t.Fatalf("lease valid again in term %d after a transfer started", term)
		}
		time.Sleep(2 * time.Millisecond)
	}
	nl := g.replica(to)
	await("a lease at the new leader", func() bool { return nl.Status().LeaseValid(clock.Now()) })
	if st := nl.Status(); st.Term <= term {
		t.Fatalf("new leader's lease in term %d, not after %d", st.Term, term)
	}
}
