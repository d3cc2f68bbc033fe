package client

import (
	"context"
	"testing"
)

// TestRoundCounter: batches in flight at once are one round; a batch that
// starts after all others were answered is the next; batches that wait for
// no round, and contexts without a counter, count nothing.
func TestRoundCounter(t *testing.T) {
	var c RoundCounter
	ctx := WithRoundCounter(context.Background(), &c)
	var a, b func()
	type step struct {
		name            string
		do              func()
		rounds, batches int64
	}
	for _, s := range []step{
		{"a read waits for nothing", func() { waitForRound(ctx, false)() }, 0, 0},
		{"write a starts: round 1", func() { a = waitForRound(ctx, true) }, 1, 1},
		{"proof b starts beside a: still round 1", func() { b = waitForRound(ctx, true) }, 1, 2},
		{"a answered, b in flight", func() { a() }, 1, 2},
		{"c starts and ends while b is in flight: round 1", func() { waitForRound(ctx, true)() }, 1, 3},
		{"b answered", func() { b() }, 1, 3},
		{"d after all were answered: round 2", func() { waitForRound(ctx, true)() }, 2, 4},
		{"no counter in the context", func() { waitForRound(context.Background(), true)() }, 2, 4},
	} {
		s.do()
		if got := c.Counts(); got.ConsensusRounds != s.rounds || got.ConsensusBatches != s.batches {
			t.Fatalf("%s: counts %+v, want %d rounds, %d batches", s.name, got, s.rounds, s.batches)
		}
	}
}
