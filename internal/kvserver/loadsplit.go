package kvserver

// Load-based splitting: a user range that serves more than
// Config.RangeSplitQPS requests a second for Config.LoadSplitAfter is split
// by its leaseholder at a key that divides its requests about evenly, so
// that the halves can be led, and served, by different nodes (the model is
// CockroachDB's load-based splitter: a decider that notices sustained load
// and a finder that samples the requests' keys).
//
// The leaseholder records each batch it serves (loadSplitter.record): a
// count per one-second window and, while the range is hot, a reservoir of
// loadSplitSamples request start keys. Every later request is compared with
// each sampled key: it falls left of it, right of it (at or after it), or
// straddles it (a scan across it). After LoadSplitAfter of sustained load,
// the sampled key with the most even left/right counts, among those that
// few requests straddle, is the split key (loadSplitter.suggest); the
// balance loop splits there (maybeSplitByLoad), at most one split per round
// like size-based splits. A range whose load is one key (or one scan over
// all of it) has no such key and is left alone.

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// DefaultRangeSplitQPS is the default of Config.RangeSplitQPS (CockroachDB's
// kv.range_split.load_qps_threshold).
const DefaultRangeSplitQPS = 2500

// DefaultLoadSplitAfter is the default of Config.LoadSplitAfter.
const DefaultLoadSplitAfter = 10 * time.Second

const (
	// loadSplitSamples is the reservoir's size.
	loadSplitSamples = 20
	// loadSplitObservationsMin is how many requests a sampled key must have
	// been compared with to be a candidate.
	loadSplitObservationsMin = 50
	// loadSplitStraddleMax is the largest share of requests straddling a
	// candidate key.
	loadSplitStraddleMax = 0.4
	// loadSplitImbalanceMax is the largest |left - right| / (left + right)
	// of a candidate key.
	loadSplitImbalanceMax = 0.5
)

// loadSample is a sampled request start key and what later requests did
// relative to it.
type loadSample struct {
	key                     []byte
	left, right, straddling int
}

// loadSplitter tracks a range's request rate and, while it is hot, where
// its requests fall. It is safe for concurrent use.
type loadSplitter struct {
	mu          sync.Mutex
	windowStart time.Time
	count       int
	// hotSince is the start of the first of the consecutive windows at or
	// above the threshold (zero: the range is not hot).
	hotSince time.Time
	samples  []loadSample
	seen     int    // requests offered to the reservoir
	rng      uint64 // xorshift state for the reservoir
}

// record counts a request over [start, end) (end nil: the key start) at
// now; qps is the threshold.
func (l *loadSplitter) record(now time.Time, start, end []byte, qps int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.windowStart.IsZero() {
		l.windowStart = now
	}
	if elapsed := now.Sub(l.windowStart); elapsed >= time.Second {
		if float64(l.count)/elapsed.Seconds() >= float64(qps) {
			if l.hotSince.IsZero() {
				l.hotSince = l.windowStart
				l.samples, l.seen = l.samples[:0], 0
			}
		} else {
			l.hotSince = time.Time{}
			l.samples, l.seen = l.samples[:0], 0
		}
		l.windowStart, l.count = now, 0
	}
	l.count++
	if l.hotSince.IsZero() {
		return
	}
	for i := range l.samples {
		s := &l.samples[i]
		switch {
		case end == nil && bytes.Compare(start, s.key) < 0, end != nil && bytes.Compare(end, s.key) <= 0:
			s.left++
		case bytes.Compare(start, s.key) >= 0:
			s.right++
		default:
			s.straddling++
		}
	}
	l.seen++
	if len(l.samples) < loadSplitSamples {
		l.samples = append(l.samples, loadSample{key: append([]byte(nil), start...)})
		return
	}
	if l.rng == 0 {
		l.rng = uint64(now.UnixNano()) | 1
	}
	l.rng ^= l.rng << 13
	l.rng ^= l.rng >> 7
	l.rng ^= l.rng << 17
	if j := int(l.rng % uint64(l.seen)); j < loadSplitSamples {
		l.samples[j] = loadSample{key: append([]byte(nil), start...)}
	}
}

// suggest returns the key to split at, or nil: the range has been hot for
// at least after, and a sampled key inside (rangeStart, rangeEnd) divides
// its requests evenly enough.
func (l *loadSplitter) suggest(now time.Time, after time.Duration, rangeStart, rangeEnd []byte) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hotSince.IsZero() || now.Sub(l.hotSince) < after {
		return nil
	}
	var best []byte
	bestImbalance := 2.0
	for _, s := range l.samples {
		total := s.left + s.right + s.straddling
		if total < loadSplitObservationsMin || s.left == 0 || s.right == 0 ||
			bytes.Compare(s.key, rangeStart) <= 0 || (len(rangeEnd) > 0 && bytes.Compare(s.key, rangeEnd) >= 0) {
			continue
		}
		if float64(s.straddling)/float64(total) > loadSplitStraddleMax {
			continue
		}
		d := s.left - s.right
		if d < 0 {
			d = -d
		}
		imbalance := float64(d) / float64(s.left+s.right)
		if imbalance <= loadSplitImbalanceMax && imbalance < bestImbalance {
			best, bestImbalance = s.key, imbalance
		}
	}
	return best
}

// reset forgets everything (after a split, the range's span changed).
func (l *loadSplitter) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.windowStart, l.count, l.hotSince = time.Time{}, 0, time.Time{}
	l.samples, l.seen = l.samples[:0], 0
}

// recordLoad records req, served by rr's leaseholder, for load-based
// splitting of user ranges.
func (n *Node) recordLoad(rr *rangeReplica, req *rpcpb.BatchRequest) {
	if n.cfg.RangeSplitQPS <= 0 {
		return
	}
	var start, end []byte // end nil while every request is on key start
	for _, ru := range req.Requests {
		k := ru.Key()
		if !keys.IsUser(k) {
			return
		}
		switch {
		case start == nil:
			start = k
		case !bytes.Equal(k, start) && end == nil:
			end = keys.Next(start)
		}
		if bytes.Compare(k, start) < 0 {
			start = k
		}
		if s := ru.GetScan(); s != nil {
			if hi := s.GetEnd(); len(hi) == 0 {
				end = keys.MaxKey
			} else if end == nil || bytes.Compare(hi, end) > 0 {
				end = hi
			}
		} else if end != nil && bytes.Compare(k, end) >= 0 {
			end = keys.Next(k)
		}
	}
	if start == nil {
		return
	}
	rr.load.record(time.Now(), start, end, n.cfg.RangeSplitQPS)
}

// maybeSplitByLoad splits rr, which this node leads, at the key its
// splitter suggests. It reports whether it split.
func (n *Node) maybeSplitByLoad(ctx context.Context, rr *rangeReplica) bool {
	if n.cfg.RangeSplitQPS <= 0 {
		return false
	}
	d := rr.sm.Desc()
	if d == nil || bytes.Compare(d.StartKey, keys.UserPrefix) < 0 {
		return false
	}
	key := rr.load.suggest(time.Now(), n.cfg.LoadSplitAfter, d.StartKey, d.EndKey)
	if key == nil {
		return false
	}
	resp := n.splitLocal(ctx, rr, key)
	if resp.Error != nil {
		n.log.Warn("load-based split failed", "range", d.RangeId, "err", resp.Error.Message)
		return false
	}
	rr.load.reset()
	n.log.Info("split a range by load", "range", d.RangeId, "at", fmt.Sprintf("%q", key), "qps_limit", n.cfg.RangeSplitQPS,
		"left", resp.Left.GetRangeId(), "right", resp.Right.GetRangeId())
	return true
}
