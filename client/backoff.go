package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff yields exponentially growing delays with jitter: each delay is
// uniform in [d/2, d], where d doubles from initial up to max. Jitter keeps
// clients that failed together from retrying together. Not safe for
// concurrent use; each retry loop owns one.
type backoff struct {
	initial, max time.Duration
	cur          time.Duration
}

func newBackoff(initial, max time.Duration) backoff { return backoff{initial: initial, max: max} }

func (b *backoff) next() time.Duration {
	switch {
	case b.cur == 0:
		b.cur = b.initial
	case b.cur < b.max:
		b.cur *= 2
		if b.cur > b.max {
			b.cur = b.max
		}
	}
	if b.cur <= 1 {
		return b.cur
	}
	half := b.cur / 2
	return half + rand.N(b.cur-half+1)
}

// sleepCtx sleeps for d or until ctx ends, whichever is first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
