package client

import (
	"testing"
	"time"
)

// TestTimingDerived: the probe timeout and the routing backoff follow the
// cluster's election timeout unless the caller set them, within their
// floors and ceilings, and the attempts keep the loop's patience.
func TestTimingDerived(t *testing.T) {
	for _, tc := range []struct {
		name           string
		set            Options
		election       time.Duration
		probe, backoff time.Duration
		attempts       int
	}{
		{"not reported", Options{}, 0, time.Second, time.Second, 40},
		{"default tick", Options{}, time.Second, time.Second, 250 * time.Millisecond, 136},
		{"50 ms tick", Options{}, 500 * time.Millisecond, 500 * time.Millisecond, 125 * time.Millisecond, 264},
		{"10 ms tick: floors", Options{}, 100 * time.Millisecond, ProbeTimeoutFloor, SendBackoffMaxFloor, 648},
		{"slow cluster: ceilings", Options{}, 20 * time.Second, ProbeTimeoutCeiling, SendBackoffMaxCeiling, 40},
		{"set by the caller", Options{ProbeTimeout: 3 * time.Second, SendBackoffMax: 2 * time.Second, SendAttemptsMax: 7},
			500 * time.Millisecond, 3 * time.Second, 2 * time.Second, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.set
			o.EnsureDefaults()
			tm := newTiming(&tc.set, &o)
			tm.adopt(tc.election, o.SendBackoffInitial)
			if tm.probe() != tc.probe || tm.sendBackoffMax() != tc.backoff || tm.sendAttempts() != tc.attempts {
				t.Fatalf("probe %v, backoff cap %v, attempts %d; want %v, %v, %d",
					tm.probe(), tm.sendBackoffMax(), tm.sendAttempts(), tc.probe, tc.backoff, tc.attempts)
			}
		})
	}
}
