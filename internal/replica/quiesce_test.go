package replica

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// await waits (a liveness wait, not an assertion on time) until cond holds.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (g *group) allQuiescent() bool {
	g.net.mu.Lock()
	defer g.net.mu.Unlock()
	for _, r := range g.net.replicas {
		if !r.Status().Quiescent {
			return false
		}
	}
	return len(g.net.replicas) > 0
}

// TestQuiesceAndWake checks that an idle group quiesces (every replica
// reports Quiescent), that a proposal wakes it and applies on every
// replica, and that the group quiesces again once idle.
func TestQuiesceAndWake(t *testing.T) {
	g := newGroupOpts(t, 0, nil, true)
	g.propose("a=1")
	await(t, "the idle group quiesces", g.allQuiescent)
	l := g.leader()
	if !l.Status().Quiescent {
		t.Fatal("leader not quiescent")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := l.Propose(ctx, []byte("b=2")); err != nil {
		t.Fatalf("proposal to the quiesced leader: %v", err)
	}
	// The proposal applied, on every replica below: the group woke. The
	// leader may be quiescent again already (it quiesces on the first
	// tick that finds the group idle), so that is not asserted.
	idx := l.Status().Applied
	for id := uint64(1); id <= 3; id++ {
		g.waitApplied(id, idx)
	}
	want := dataOf(t, g.engines[l.Status().Leader])
	for id := uint64(1); id <= 3; id++ {
		if got := dataOf(t, g.engines[id]); got != want || !strings.Contains(got, "b\x012") {
			t.Fatalf("replica %d holds %q, want %q", id, got, want)
		}
	}
	await(t, "the group quiesces again", g.allQuiescent)
	// A read wakes it too.
	if err := l.ReadIndex(ctx); err != nil {
		t.Fatalf("read on the quiesced leader: %v", err)
	}
	await(t, "the group quiesces after the read", g.allQuiescent)
}

// TestQuiescedFollowersElectWhenLeaderStops checks that followers
// quiesced under a leader whose node then goes silent wake (the test's
// ticker plays node liveness) and elect a new leader, which then commits.
func TestQuiescedFollowersElectWhenLeaderStops(t *testing.T) {
	g := newGroupOpts(t, 0, nil, true)
	g.propose("a=1")
	await(t, "the idle group quiesces", g.allQuiescent)
	old := g.leader().Status().Leader
	g.stop(old)
	await(t, "a new leader", func() bool {
		g.net.mu.Lock()
		defer g.net.mu.Unlock()
		for _, r := range g.net.replicas {
			if r.Status().IsLeader {
				return true
			}
		}
		return false
	})
	g.propose("b=2")
	l := g.leader()
	if l.Status().Leader == old {
		t.Fatal("stopped node still leads")
	}
	for id := uint64(1); id <= 3; id++ {
		if id != old {
			g.waitApplied(id, l.Status().Applied)
			if got := dataOf(t, g.engines[id]); !strings.Contains(got, "b\x012") {
				t.Fatalf("replica %d holds %q", id, got)
			}
		}
	}
}

// TestQuiesceWithDeadFollower checks that a group with a follower on a
// node that is not live (Config.PeerLive) quiesces without it once the
// leader and the live follower hold the whole log, and that the follower,
// back, catches up on what it missed.
func TestQuiesceWithDeadFollower(t *testing.T) {
	var g *group
	g = newGroupOpts(t, 0, func(c *Config) {
		c.PeerLive = func(id uint64) bool { return g.replica(id) != nil }
	}, true)
	g.propose("a=1")
	await(t, "the idle group quiesces", g.allQuiescent)
	l := g.leader()
	leader := l.Status().Leader
	var dead uint64
	for id := uint64(1); id <= 3; id++ {
		if id != leader {
			dead = id
			break
		}
	}
	g.stop(dead)
	g.propose("b=2")
	runningQuiescent := func() bool {
		for id := uint64(1); id <= 3; id++ {
			if r := g.replica(id); id != dead && (r == nil || !r.Status().Quiescent) {
				return false
			}
		}
		return true
	}
	await(t, "the group quiesces without its dead follower", runningQuiescent)
	g.start(dead, 0)
	idx := g.replica(leader).Status().Applied
	g.waitApplied(dead, idx)
	if got := dataOf(t, g.engines[dead]); !strings.Contains(got, "b\x012") {
		t.Fatalf("the follower back holds %q, want b=2", got)
	}
}

// TestLeaseReadWakesAndRenews checks that a read served by a quiesced
// leader's lease (NoteLeaseRead) wakes the group and renews the lease
// before the group quiesces again (here past half the lease, so by either
// rule: the tick past the half, or the quiescing tick after a read; the
// stepped test quiesce-lease tells them apart), so that a range serving
// only lease reads keeps its lease instead of letting it run out while
// quiescent.
func TestLeaseReadWakesAndRenews(t *testing.T) {
	g, clock, d := newLeaseGroup(t, true)
	g.propose("a=1")
	l := g.leader()
	await(t, "a lease", func() bool { return l.Status().LeaseValid(clock.Now()) })
	await(t, "the idle group quiesces", g.allQuiescent)
	exp := l.Status().LeaseExpiry
	// Past half of the lease, still inside it: a lease read wakes the
	// leader, which renews from a round issued at the new time.
	clock.advance(d/2 + time.Millisecond)
	t1 := clock.Now()
	if !l.Status().LeaseValid(t1) {
		t.Fatalf("lease expired at %v (expiry %v)", t1, exp)
	}
	l.NoteLeaseRead()
	if l.Quiescent() {
		t.Fatal("leader still quiescent after a lease read")
	}
	await(t, "the lease renewed from the read's time", func() bool {
		return l.Status().LeaseExpiry.Equal(t1.Add(d))
	})
	await(t, "the group quiesces again", g.allQuiescent)
	if !l.Status().LeaseValid(clock.Now()) {
		t.Fatal("renewed lease not valid")
	}
}

// TestLeaseReadRacingQuiesceWakes checks the race between a lease read and
// the leader's quiesce: a read whose NoteLeaseRead found the leader awake
// (it set the flag after the drain took it, and checked quiescence before
// the leader set it) must not be lost. The hook plays the read's flag at
// the worst moment, right after the leader marked itself quiescent; the
// leader must wake again through OnWake (the node's tick loop keeps its
// active set by it) and go on ticking: it renews the lease for the read
// and then quiesces.
func TestLeaseReadRacingQuiesceWakes(t *testing.T) {
	var armed, fired, wakes, atHook atomic.Int32
	testingAfterQuiesceStore = func(r *Replica) {
		if armed.Load() == 1 && fired.CompareAndSwap(0, 1) {
			atHook.Store(wakes.Load())
			r.leaseRead.Store(true)
		}
	}
	// Reset after the group has stopped (cleanups run last first).
	t.Cleanup(func() { testingAfterQuiesceStore = nil })
	g := newGroupOpts(t, 0, func(c *Config) { c.OnWake = func() { wakes.Add(1) } }, true)
	g.propose("a=1")
	armed.Store(1)
	// A lease read, so that the group is awake (it may have quiesced
	// before the hook was armed) and its next quiesce plays the race.
	// Nothing else wakes it after that quiesce but the undo.
	g.leader().NoteLeaseRead()
	await(t, "the race played", func() bool { return fired.Load() == 1 })
	await(t, "the group quiesces after the read", g.allQuiescent)
	if wakes.Load() <= atHook.Load() {
		t.Fatal("the leader undid its quiesce without telling OnWake")
	}
}
