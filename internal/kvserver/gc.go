package kvserver

import (
	"bytes"
	"context"
	"fmt"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/tso"
)

// Limits of version GC.
const (
	// GCVersionsPerCommand bounds the versions one GC command removes, so
	// that one Raft entry stays small.
	GCVersionsPerCommand = 10000
	// GCCommandsPerRound bounds the GC commands per range per round.
	GCCommandsPerRound = 100
)

// collectLedRanges is the periodic GC round; a round is bounded by the
// GC interval so that rounds never pile up.
func (n *Node) collectLedRanges() {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.GCInterval)
	defer cancel()
	if _, err := n.CollectGarbage(ctx); err != nil {
		n.log.Debug("version GC", "err", err)
	}
}

// collectRange runs version GC below threshold over one range the node
// leads. It returns the number of versions removed, and whether it got
// to the range's end (a round stops after GCCommandsPerRound commands).
func (n *Node) collectRange(ctx context.Context, rr *rangeReplica, threshold uint64) (int, bool, error) {
	var start []byte
	total := 0
	for i := 0; i < GCCommandsPerRound; i++ {
		res, e := n.propose(ctx, rr, &rpcpb.RaftCommand{Gc: &rpcpb.GCCommand{Threshold: threshold, StartKey: start, VersionsMax: GCVersionsPerCommand}})
		if e != nil {
			return total, false, errorf(e)
		}
		r, ok := res.(gcResult)
		if !ok {
			return total, false, nil
		}
		total += r.deleted
		if len(r.resume) == 0 {
			return total, true, nil
		}
		start = r.resume
	}
	return total, false, nil
}

// CollectGarbage runs one round of version GC over every user range this
// node leads, now. It returns the number of versions removed and the first
// error (a failed range does not stop the others).
func (n *Node) CollectGarbage(ctx context.Context) (int, error) {
	n.gcMu.Lock()
	defer n.gcMu.Unlock()
	// Each range's data-change count before the oracle timestamp: every
	// version applied by then has a timestamp below now (gcSkip).
	reps := n.replicaList()
	changes := make(map[uint64]uint64, len(reps))
	for _, rr := range reps {
		changes[rr.r.RangeID()] = rr.sm.dataChanges.Load()
	}
	// One threshold for the round: GCTTL behind a fresh oracle timestamp.
	now, e := n.timestamp(ctx)
	if e != nil {
		return 0, errorf(e)
	}
	ttl := uint64(n.cfg.GCTTL.Milliseconds()) << tso.DefaultLogicalBits
	if now <= ttl {
		return 0, nil
	}
	total := 0
	var first error
	for _, rr := range reps {
		d := rr.sm.Desc()
		// Only ranges holding user keys have versions (the last status
		// range ends at the user prefix, so test the end key strictly).
		if d == nil || !rr.r.Status().IsLeader || bytes.Compare(d.EndKey, keys.UserPrefix) <= 0 {
			continue
		}
		if n.gcSkip(rr, changes[rr.r.RangeID()], now, now-ttl) {
			continue
		}
		k, complete, err := n.collectRange(ctx, rr, now-ttl)
		if complete {
			n.gcDone(rr, now-ttl)
		}
		total += k
		if err != nil && first == nil {
			first = fmt.Errorf("range r%d: %w", d.RangeId, err)
		}
	}
	return total, first
}

// gcRangeState is what the GC rounds of this node remember about one range
// (see gcSkip).
type gcRangeState struct {
	// changes is the range's dataChanges count when last looked at, and
	// since the oracle timestamp that round read: every version in the
	// range was written before that round, so its timestamp is below
	// since (timestamps come from the oracle before a write is proposed).
	changes, since uint64
	// cleanAt is the highest threshold at which GC found nothing to remove
	// (or removed everything) with changes unchanged; 0: none yet.
	cleanAt uint64
}

// gcSkip reports whether the GC round with oracle timestamp now and
// threshold may leave rr alone, which wakes no quiescent range. changes is
// rr's data-change count read before now was taken (so every version it
// counts is below now; a count read later could include a write above
// now):
//   - the range's data has not changed since a round at oracle time since,
//     and GC already ran clean at a threshold >= since. Every version is
//     then below that threshold, so each key already has only its newest
//     version, and no higher threshold finds more: skip for good, until
//     the data changes.
//   - otherwise a dry run of GC at threshold over the local engine, which
//     proposes nothing, finds nothing to remove (the first version to
//     remove ends it).
//
// Skipping is always safe: GC removes only garbage, and a threshold left
// where it was refuses fewer reads, all of which the versions kept still
// answer.
func (n *Node) gcSkip(rr *rangeReplica, changes, now, threshold uint64) bool {
	id := rr.r.RangeID()
	st, ok := n.gcState[id]
	if !ok || st.changes != changes {
		st = gcRangeState{changes: changes, since: now}
	}
	defer func() { n.gcState[id] = st }()
	if st.cleanAt != 0 && st.cleanAt >= st.since {
		return true
	}
	d := rr.sm.Desc()
	if d == nil {
		return true
	}
	b := n.eng.NewBatch()
	found, _, err := mvcc.GCLimited(b, d.StartKey, d.EndKey, threshold, 1)
	b.Close()
	if err != nil || found > 0 {
		return false
	}
	st.cleanAt = threshold
	return true
}

// gcDone records that a GC round at threshold ran over the whole of rr.
// Its own GC commands do not count as data changes.
func (n *Node) gcDone(rr *rangeReplica, threshold uint64) {
	id := rr.r.RangeID()
	if st, ok := n.gcState[id]; ok && st.changes == rr.sm.dataChanges.Load() {
		st.cleanAt = threshold
		n.gcState[id] = st
	}
}
