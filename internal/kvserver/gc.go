package kvserver

import (
	"bytes"
	"context"
	"fmt"

	"github.com/canopy-db/canopy/internal/eval"
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
		res, e := n.propose(ctx, rr, &rpcpb.RaftCommand{Gc: &rpcpb.GCCommand{Threshold: threshold, StartKey: start, VersionsMax: GCVersionsPerCommand, KeyRecords: true}})
		if e != nil {
			return total, false, errorf(e)
		}
		r, ok := res.(gcResult)
		if !ok {
			return total, false, nil
		}
		total += r.deleted
		n.countGC(r.deleted, r.records)
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
		if d == nil || !rr.r.Status().IsLeader {
			continue
		}
		if isStatusRange(d) {
			if err := n.collectStaging(ctx, rr, changes[rr.r.RangeID()]); err != nil && first == nil {
				first = fmt.Errorf("range r%d: staging GC: %w", d.RangeId, err)
			}
		}
		// Only ranges holding user keys have versions (the last status
		// range ends at the user prefix, so test the end key strictly).
		if bytes.Compare(d.EndKey, keys.UserPrefix) <= 0 {
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
//     proposes nothing, finds nothing to remove (the first version or key
//     record entry to remove ends it).
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
	var kr eval.KeyRecordGC
	slots := 0
	found, _, err := mvcc.GCLimitedPlain(b, d.StartKey, d.EndKey, threshold, 1, keyRecordGC(threshold, &kr, &slots))
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

// Status-table GC (docs/design-notes.md, "GC of the records parallel
// commits and 1PC leave"): the STAGING and FENCE records of decided
// transactions. The leader finds candidates on its own engine (a staging
// key whose status key holds a value), proposes them in GC commands of at
// most GCStagingKeysPerCommand keys, and every replica deletes, at
// application, those whose status key still holds a value (it never goes).

// GCStagingKeysPerCommand bounds the staging keys of one GC command.
const GCStagingKeysPerCommand = 1000

// gcScanPage is how many plain keys the leader reads at a time.
const gcScanPage = 1024

// isStatusRange reports whether d holds part of the status table.
func isStatusRange(d *rpcpb.RangeDescriptor) bool {
	return bytes.Compare(d.StartKey, keys.UserPrefix) < 0 &&
		(len(d.EndKey) == 0 || bytes.Compare(d.EndKey, keys.StatusPrefix) > 0)
}

// collectStaging runs status-table GC over a status range the node leads.
// changes is the range's data-change count read before the round: a range
// scanned in full at the same count is skipped (nothing was decided or
// written since, and GC commands do not count), so an idle status range
// stays quiescent.
func (n *Node) collectStaging(ctx context.Context, rr *rangeReplica, changes uint64) error {
	id := rr.r.RangeID()
	if c, ok := n.stagingClean[id]; ok && c == changes {
		return nil
	}
	d := rr.sm.Desc()
	start, end := d.StartKey, d.EndKey
	if bytes.Compare(start, keys.StatusPrefix) < 0 {
		start = keys.StatusPrefix
	}
	if len(end) == 0 || bytes.Compare(end, keys.UserPrefix) > 0 {
		end = keys.UserPrefix
	}
	snap := n.eng.NewSnapshot()
	defer snap.Close()
	var cand [][]byte
	commands := 0
	applied := true // every command proposed applied as GC
	flush := func() error {
		if len(cand) == 0 {
			return nil
		}
		res, e := n.propose(ctx, rr, &rpcpb.RaftCommand{Gc: &rpcpb.GCCommand{StagingKeys: cand}})
		cand = nil
		commands++
		if e != nil {
			return errorf(e)
		}
		r, ok := res.(gcResult)
		applied = applied && ok
		n.countGC(0, r.records)
		return nil
	}
	for {
		kvs, resume, err := mvcc.ScanPlain(snap, start, end, gcScanPage)
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			sk, ok := eval.StagingStatusKey(kv.Key)
			if !ok {
				continue
			}
			if _, decided, err := mvcc.GetPlain(snap, sk); err != nil {
				return err
			} else if !decided {
				continue
			}
			cand = append(cand, kv.Key)
			if len(cand) == GCStagingKeysPerCommand {
				if err := flush(); err != nil {
					return err
				}
				if commands >= GCCommandsPerRound {
					return nil // the next round goes on
				}
			}
		}
		if len(resume) == 0 {
			break
		}
		start = resume
	}
	if err := flush(); err != nil {
		return err
	}
	if applied {
		n.stagingClean[id] = changes
	}
	return nil
}

// countGC adds what one GC command removed to the node's metrics.
func (n *Node) countGC(versions int, r gcRecords) {
	m := n.ops.metrics
	if m == nil {
		return
	}
	m.gcRemoved.WithLabelValues("version").Add(float64(versions))
	m.gcRemoved.WithLabelValues("staging_record").Add(float64(r.staging))
	m.gcRemoved.WithLabelValues("fence_record").Add(float64(r.fence))
	m.gcRemoved.WithLabelValues("refusal").Add(float64(r.refusals))
	m.gcRemoved.WithLabelValues("one_pc_entry").Add(float64(r.onePC))
}
