package kvserver

import (
	"bytes"
	"context"
	"fmt"

	"github.com/canopy-db/canopy/internal/keys"
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
// leads. It returns the number of versions removed.
func (n *Node) collectRange(ctx context.Context, rr *rangeReplica, threshold uint64) (int, error) {
	var start []byte
	total := 0
	for i := 0; i < GCCommandsPerRound; i++ {
		res, e := n.propose(ctx, rr, &rpcpb.RaftCommand{Gc: &rpcpb.GCCommand{Threshold: threshold, StartKey: start, VersionsMax: GCVersionsPerCommand}})
		if e != nil {
			return total, errorf(e)
		}
		r, ok := res.(gcResult)
		if !ok {
			return total, nil
		}
		total += r.deleted
		if len(r.resume) == 0 {
			return total, nil
		}
		start = r.resume
	}
	return total, nil
}

// CollectGarbage runs one round of version GC over every user range this
// node leads, now. It returns the number of versions removed and the first
// error (a failed range does not stop the others).
func (n *Node) CollectGarbage(ctx context.Context) (int, error) {
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
	for _, rr := range n.replicaList() {
		d := rr.sm.Desc()
		// Only ranges holding user keys have versions (the last status
		// range ends at the user prefix, so test the end key strictly).
		if d == nil || !rr.r.Status().IsLeader || bytes.Compare(d.EndKey, keys.UserPrefix) <= 0 {
			continue
		}
		k, err := n.collectRange(ctx, rr, now-ttl)
		total += k
		if err != nil && first == nil {
			first = fmt.Errorf("range r%d: %w", d.RangeId, err)
		}
	}
	return total, first
}
