package kvserver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// OracleRangeID is the range holding the oracle's bound; its leaseholder
// hosts the oracle.
const OracleRangeID = 1

// OracleBatchMax is the most timestamps one Timestamps request may ask for.
const OracleBatchMax = 65536

// NodeTimestampBatchMax bounds the timestamps one node asks the oracle for
// at once on behalf of its waiting writes.
const NodeTimestampBatchMax = 1024

// OracleHintsMax bounds how many leaseholder hints a node follows to reach
// the oracle for a Put's timestamp.
const OracleHintsMax = 5

// oraclePersister keeps the oracle's bound in range 1 (tso.Persister).
type oraclePersister struct{ n *Node }

func (p *oraclePersister) r1() (*rangeReplica, error) {
	rr := p.n.replica(OracleRangeID)
	if rr == nil || !rr.r.Status().IsLeader {
		return nil, errors.New("kvserver: not the leaseholder of range 1")
	}
	return rr, nil
}

// CASBound implements tso.Persister.
func (p *oraclePersister) CASBound(ctx context.Context, expected, new uint64) (uint64, bool, error) {
	rr, err := p.r1()
	if err != nil {
		return 0, false, err
	}
	res, e := p.n.propose(ctx, rr, &rpcpb.RaftCommand{CasBound: &rpcpb.CASBoundCommand{Expected: expected, NewBound: new}})
	if e != nil {
		return 0, false, fmt.Errorf("kvserver: persisting oracle bound: %s", e.Message)
	}
	switch r := res.(type) {
	case casResult:
		return r.current, r.ok, nil
	case *rpcpb.BatchResponse:
		return 0, false, fmt.Errorf("kvserver: persisting oracle bound: %s", r.Error.GetMessage())
	}
	return 0, false, fmt.Errorf("kvserver: unexpected result %T", res)
}

// LoadBound implements tso.Persister.
func (p *oraclePersister) LoadBound(ctx context.Context) (uint64, error) {
	rr, err := p.r1()
	if err != nil {
		return 0, err
	}
	if err := rr.r.ReadIndex(ctx); err != nil {
		return 0, err
	}
	v, found, err := mvcc.GetPlain(p.n.eng, keys.OracleBoundKey)
	if err != nil || !found {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("kvserver: oracle bound of %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// checkOracleLeadership resets the oracle whenever the leadership of
// range 1 changes hands: lost, gained, or regained in a new term (another
// leader may have won a window in between). It returns the term of the
// current leadership, or 0 if this node does not lead range 1.
func (n *Node) checkOracleLeadership() uint64 {
	rr := n.replica(OracleRangeID)
	var term uint64
	if rr != nil {
		if st := rr.r.Status(); st.IsLeader {
			term = st.Term
		}
	}
	n.mu.Lock()
	changed := term != n.mu.oracleTerm
	n.mu.oracleTerm = term
	n.mu.Unlock()
	if changed {
		n.oracle.Reset()
	}
	return term
}

// allocateLocal hands out count timestamps if this node leads range 1.
// After allocating, it confirms that it still leads range 1, in the same
// term as the window it allocated from: by its lease if that is valid
// (no memory access but a clock read), else by a quorum round (ReadIndex).
// A deposed leader thus never returns timestamps after a newer leader has
// started handing out higher ones (I4): a newer leader cannot be elected
// while the old one's lease runs.
func (n *Node) allocateLocal(ctx context.Context, count uint32) (uint64, *rpcpb.Error) {
	rr := n.replica(OracleRangeID)
	if rr == nil {
		e := pbErr(rpcpb.ErrorCode_NOT_LEASEHOLDER, "node n%d has no replica of range 1 (the oracle)", n.NodeID())
		return 0, e
	}
	term := n.checkOracleLeadership()
	if term == 0 {
		return 0, n.notLeaseholder(rr)
	}
	first, err := n.oracle.Allocate(ctx, count)
	if err != nil {
		return 0, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "oracle: %v", err)
	}
	if rr.r.ReadByLease(term) {
		return first, nil
	}
	if err := rr.r.ReadIndex(ctx); err != nil {
		return 0, n.proposeErr(rr, err)
	}
	if st := rr.r.Status(); !st.IsLeader || st.Term != term {
		return 0, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "oracle: leadership of range 1 changed during allocation")
	}
	return first, nil
}

// timestamp returns one timestamp from the oracle, wherever it runs.
// Concurrent callers on this node share one request (tso.Batcher), so a
// node's many Puts cost one oracle round between them, not one each.
func (n *Node) timestamp(ctx context.Context) (uint64, *rpcpb.Error) {
	start := time.Now()
	ts, err := n.tsBatcher.Timestamp(ctx)
	n.ops.metrics.tso.ObserveBatcherWait(time.Since(start))
	if err != nil {
		var pe *rpcpb.Error
		if errors.As(err, &pe) {
			return 0, pe
		}
		return 0, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "oracle: %v", err)
	}
	return ts, nil
}

// fetchTimestamps asks the oracle for count timestamps, following
// leaseholder hints, on behalf of every caller waiting in n.tsBatcher: it
// is bounded by the request timeout and the node's life, not by a caller.
//
// One attempt at a remote oracle host is bounded by an election timeout: a
// host that does not answer (stopped, cut off) is asked again only after
// range 1's leader, as this node's replica of it sees it, has been read
// again, so the request moves to a new oracle host as soon as range 1
// elects one, instead of waiting out the request timeout.
func (n *Node) fetchTimestamps(count int) (uint64, error) {
	ctx, cancel := context.WithTimeout(n.stopCtx, n.cfg.RequestTimeout)
	defer cancel()
	leader := func() uint64 {
		if rr := n.replica(OracleRangeID); rr != nil {
			return rr.r.Status().Leader
		}
		return 0
	}
	// A node without a replica of range 1 learns the host by asking the
	// others in turn, following their hints.
	nextOther := n.r1Others(ctx).next
	target := leader()
	if target == 0 {
		target = nextOther()
	}
	var last *rpcpb.Error
	for hints := 0; hints < OracleHintsMax; {
		if target == 0 || target == n.NodeID() {
			ts, e := n.allocateLocal(ctx, uint32(count))
			if e == nil {
				n.noteOracleHost(n.NodeID())
				return ts, nil
			}
			last = e
			if e.Code != rpcpb.ErrorCode_NOT_LEASEHOLDER || e.LeaseholderHint == 0 || e.LeaseholderHint == n.NodeID() {
				return 0, e
			}
			target = e.LeaseholderHint
			hints++
			continue
		}
		cl, err := n.kvClient(target)
		if err != nil {
			return 0, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "oracle: %v", err)
		}
		actx, acancel := context.WithTimeout(ctx, n.electionTimeout())
		resp, err := cl.Timestamps(actx, &rpcpb.TimestampRequest{Count: uint32(count)})
		acancel()
		if err != nil {
			last = pbErr(rpcpb.ErrorCode_UNAVAILABLE, "oracle on n%d: %v", target, err)
			n.forgetOracleHost(target)
			// Wait a tick for range 1's view of its leader to move on, then
			// ask whoever leads it now.
			select {
			case <-ctx.Done():
				return 0, last
			case <-time.After(n.cfg.TickInterval):
			}
			if target = leader(); target == 0 {
				if target = nextOther(); target == 0 {
					return 0, last
				}
			}
			continue
		}
		if resp.Error == nil {
			if resp.Count != uint32(count) || resp.First == 0 {
				return 0, pbErr(rpcpb.ErrorCode_INTERNAL, "oracle on n%d returned %d timestamps from %d, asked for %d", target, resp.Count, resp.First, count)
			}
			n.noteOracleHost(target)
			return resp.First, nil
		}
		last = resp.Error
		if resp.Error.Code == rpcpb.ErrorCode_NOT_LEASEHOLDER && resp.Error.LeaseholderHint == 0 {
			if o := nextOther(); o != 0 {
				target = o
				continue
			}
		}
		if resp.Error.Code != rpcpb.ErrorCode_NOT_LEASEHOLDER || resp.Error.LeaseholderHint == 0 {
			return 0, resp.Error
		}
		target = resp.Error.LeaseholderHint
		hints++
	}
	if last == nil {
		return 0, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "oracle: no leaseholder found")
	}
	return 0, last
}
