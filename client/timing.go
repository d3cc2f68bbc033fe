package client

import (
	"sync/atomic"
	"time"
)

// Timing derived from the cluster's election timeout (issue 13, item 7).
//
// How long a client waits before it gives up on a node, and how long it
// sleeps between routing attempts, should follow how fast the cluster
// itself recovers: a range whose leader stopped has another within one
// to two election timeouts. Fixed defaults (1 s for both) suited the
// default 100 ms tick and were too slow for a cluster ticking faster: with
// 50 ms ticks a range had a new leaseholder after about 1 s, but a routing
// loop that had been retrying since the fault was by then in a 320-640 ms
// sleep, or about to start a 1 s one, and a stopped node was given up
// only after 250 ms + 1 s (the tails of "fault to first success" in
// docs/RELIABILITY.md).
//
// So the first node to answer Open (ClusterInfo) reports its election
// timeout E (ElectionTicks x its tick), and unless the caller set them,
// the client uses:
//   - ProbeTimeout = E, at least ProbeTimeoutFloor: a node that cannot
//     answer a health probe within an election timeout would lose its
//     leaderships anyway; the floor keeps a loaded machine's slow answer
//     from being taken for silence when ticks are very short;
//   - SendBackoffMax = E/4, within [SendBackoffMaxFloor, 1 s]: a routing
//     loop notices a new leaseholder at most a quarter of an election
//     timeout after it is there;
//   - SendAttemptsMax = enough attempts that the loop keeps trying for
//     about as long as the fixed defaults did (40 attempts, most of them
//     after 1 s sleeps: about 33 s), so that a longer outage is not given
//     up on sooner than before.
//
// With the default tick (100 ms, E = 1 s) the probe timeout is unchanged
// (1 s) and the backoff cap drops from 1 s to 250 ms.
type timing struct {
	probeTimeout atomic.Int64 // nanoseconds
	backoffMax   atomic.Int64 // nanoseconds
	attemptsMax  atomic.Int64
	// derive* record which of the three the caller left to the client.
	deriveProbe, deriveBackoff, deriveAttempts bool
}

const (
	// ProbeTimeoutFloor is the least derived ProbeTimeout.
	ProbeTimeoutFloor = 500 * time.Millisecond
	// ProbeTimeoutCeiling is the most derived ProbeTimeout.
	ProbeTimeoutCeiling = 5 * time.Second
	// SendBackoffMaxFloor is the least derived SendBackoffMax.
	SendBackoffMaxFloor = 50 * time.Millisecond
	// SendBackoffMaxCeiling is the most derived SendBackoffMax.
	SendBackoffMaxCeiling = time.Second
	// sendPatience is about how long the fixed defaults kept one routing
	// loop trying: 40 attempts, the backoff reaching 1 s after 8.
	sendPatience = 32 * time.Second
	// sendAttemptsRamp: the attempts before the backoff reaches its cap.
	sendAttemptsRamp = 8
)

// newTiming starts from the caller's options (before EnsureDefaults: a
// zero field is left to the client) and the defaults (after).
func newTiming(set, defaulted *Options) *timing {
	t := &timing{
		deriveProbe:    set.ProbeTimeout == 0,
		deriveBackoff:  set.SendBackoffMax == 0,
		deriveAttempts: set.SendAttemptsMax == 0,
	}
	t.probeTimeout.Store(int64(defaulted.ProbeTimeout))
	t.backoffMax.Store(int64(max(defaulted.SendBackoffMax, defaulted.SendBackoffInitial)))
	t.attemptsMax.Store(int64(defaulted.SendAttemptsMax))
	return t
}

// adopt derives the timing from the cluster's election timeout (0: not
// reported, nothing changes). initial is Options.SendBackoffInitial, which
// the cap never goes below.
func (t *timing) adopt(election time.Duration, initial time.Duration) {
	if election <= 0 {
		return
	}
	if t.deriveProbe {
		t.probeTimeout.Store(int64(min(max(election, ProbeTimeoutFloor), ProbeTimeoutCeiling)))
	}
	if t.deriveBackoff {
		t.backoffMax.Store(int64(max(min(max(election/4, SendBackoffMaxFloor), SendBackoffMaxCeiling), initial)))
	}
	if t.deriveAttempts {
		capped := time.Duration(t.backoffMax.Load())
		t.attemptsMax.Store(int64(max(40, sendAttemptsRamp+int(sendPatience/capped))))
	}
}

func (t *timing) probe() time.Duration          { return time.Duration(t.probeTimeout.Load()) }
func (t *timing) sendBackoffMax() time.Duration { return time.Duration(t.backoffMax.Load()) }
func (t *timing) sendAttempts() int             { return int(t.attemptsMax.Load()) }
