package tso

import (
	"fmt"
	"time"
)

// Defaults of Options.
const (
	DefaultBoundAhead       = 3 * time.Second
	DefaultLogicalBits      = 18
	DefaultAllocateCountMax = 1 << 16
	DefaultCASAttemptsMax   = 3
)

// LogicalBitsMax is the largest LogicalBits. With 22 logical bits the
// physical part (milliseconds since the Unix epoch) has 42 bits, enough
// until the year 2109.
const LogicalBitsMax = 22

// BoundAheadMax is the largest Options.BoundAhead: a failover may make
// timestamps jump this far ahead of the wall clock.
const BoundAheadMax = time.Hour

// Options configures an Oracle. The zero value is the default for every
// field; EnsureDefaults fills them in and Validate rejects the rest.
type Options struct {
	// Clock returns the wall-clock time whose milliseconds form the
	// physical part of a timestamp. Default time.Now. The Oracle never
	// relies on it being monotonic or synchronised: timestamps still strictly
	// increase if it jumps backwards (they just run ahead of it for a while).
	Clock func() time.Time
	// BoundAhead is how far past the current physical time each persisted
	// bound reaches (and at least BoundAhead/16 past the request that
	// needs it, when timestamps run ahead of the clock). Larger: fewer
	// persists (one per BoundAhead of wall time at low load). Smaller: after
	// a failover the new leader's first timestamp, which is above the old
	// bound, runs less far ahead of the wall clock: at most BoundAhead,
	// unless host changes come less than BoundAhead/16 apart. Whole
	// milliseconds; in [1ms, BoundAheadMax]. Default 3s.
	BoundAhead time.Duration
	// LogicalBits is the count of low bits counting timestamps within one
	// millisecond (2^18 = 262,144 per millisecond by default). When a
	// millisecond's logical space is used up, timestamps borrow from the next
	// millisecond rather than wait. At most LogicalBitsMax. Default 18.
	LogicalBits uint
	// AllocateCountMax is the most timestamps one Allocate may return.
	// Default 65,536.
	AllocateCountMax uint32
	// CASAttemptsMax is how many times one bound extension tries its
	// compare-and-set when it finds the bound moved by another oracle
	// (a competing leader) before giving up with ErrBoundContended.
	// Default 3.
	CASAttemptsMax int
	// Metrics, if not nil, counts the oracle's requests and bound
	// extensions (metrics.go).
	Metrics *Metrics
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.BoundAhead == 0 {
		o.BoundAhead = DefaultBoundAhead
	}
	if o.LogicalBits == 0 {
		o.LogicalBits = DefaultLogicalBits
	}
	if o.AllocateCountMax == 0 {
		o.AllocateCountMax = DefaultAllocateCountMax
	}
	if o.CASAttemptsMax == 0 {
		o.CASAttemptsMax = DefaultCASAttemptsMax
	}
}

// Validate rejects options that EnsureDefaults has not made usable. It
// returns an error wrapping ErrInvalidArgument.
func (o *Options) Validate() error {
	switch {
	case o.Clock == nil:
		return fmt.Errorf("%w: no clock", ErrInvalidArgument)
	case o.BoundAhead < time.Millisecond || o.BoundAhead > BoundAheadMax:
		return fmt.Errorf("%w: bound ahead %v not in [1ms, %v]", ErrInvalidArgument, o.BoundAhead, BoundAheadMax)
	case o.LogicalBits < 1 || o.LogicalBits > LogicalBitsMax:
		return fmt.Errorf("%w: logical bits %d not in [1, %d]", ErrInvalidArgument, o.LogicalBits, LogicalBitsMax)
	case o.AllocateCountMax < 1:
		return fmt.Errorf("%w: allocate count max is 0", ErrInvalidArgument)
	case o.CASAttemptsMax < 1:
		return fmt.Errorf("%w: CAS attempts max %d is below 1", ErrInvalidArgument, o.CASAttemptsMax)
	}
	return nil
}
