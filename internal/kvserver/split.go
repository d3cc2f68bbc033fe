package kvserver

import (
	"bytes"
	"context"
	"fmt"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"google.golang.org/protobuf/proto"
)

// SplitHopsMax bounds how often a split request is forwarded towards the
// leaseholder of the range it splits.
const SplitHopsMax = 3

// split splits the range containing key at key (a logical user key). The
// right hand side's range ID comes from the counter in range 1.
func (n *Node) split(ctx context.Context, key []byte) *rpcpb.SplitResponse {
	fail := func(e *rpcpb.Error) *rpcpb.SplitResponse { return &rpcpb.SplitResponse{Error: e} }
	if !n.bootstrapped() {
		return fail(pbErr(rpcpb.ErrorCode_NOT_BOOTSTRAPPED, "node is not part of a cluster yet: run canopy init"))
	}
	if !keys.IsStatusSplitKey(key) && (!keys.IsUser(key) || len(key) > keys.KeyBytesMax+1) {
		return fail(pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "split key %q must be a user key of at most KeyBytesMax (%d) bytes, or a split point of the status table (its prefix and one byte)", key, keys.KeyBytesMax))
	}
	for hop := 0; ; hop++ {
		d, e := n.lookupMeta(ctx, key)
		if e != nil {
			return fail(e)
		}
		if bytes.Equal(d.StartKey, key) {
			return &rpcpb.SplitResponse{Right: d} // already split here
		}
		rr := n.replica(d.RangeId)
		if rr != nil && rr.r.Status().IsLeader && rr.sm.Desc() != nil {
			return n.splitLocal(ctx, rr, key)
		}
		if hop == SplitHopsMax || rr == nil || rr.r.Status().Leader == 0 {
			return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "range r%d has no known leaseholder here", d.RangeId))
		}
		cl, err := n.kvClient(rr.r.Status().Leader)
		if err != nil {
			return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "%v", err))
		}
		resp, err := cl.Split(ctx, &rpcpb.SplitRequest{SplitKey: key})
		if err != nil {
			return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "%v", err))
		}
		if resp.Error == nil || resp.Error.Code != rpcpb.ErrorCode_NOT_LEASEHOLDER {
			return resp
		}
	}
}

func (n *Node) splitLocal(ctx context.Context, rr *rangeReplica, key []byte) *rpcpb.SplitResponse {
	fail := func(e *rpcpb.Error) *rpcpb.SplitResponse { return &rpcpb.SplitResponse{Error: e} }
	d := rr.sm.Desc()
	newID, err := n.proposeRemoteValue(ctx, OracleRangeID, &rpcpb.RaftCommand{AllocRangeId: &rpcpb.AllocRangeIDCommand{}})
	if err != nil {
		return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "allocating a range ID: %v", err))
	}
	// A write latch over the whole range: writes in flight apply first
	// (evaluated under the old descriptor, they would be refused after
	// the split), and none evaluates until the split has applied.
	g, err := rr.latches.Acquire(ctx, []concurrency.LatchSpan{{Span: concurrency.Span{Key: d.StartKey, EndKey: d.EndKey}, Access: concurrency.Write}})
	if err != nil {
		return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "waiting for latches: %v", err))
	}
	data, err := proto.Marshal(&rpcpb.RaftCommand{Split: &rpcpb.SplitCommand{SplitKey: key, NewRangeId: newID, ExpectedGeneration: d.Generation}})
	if err != nil {
		rr.latches.Release(g)
		return fail(pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err))
	}
	res, err := rr.r.ProposeEvaluated(ctx, data, 0, func(any, error) { rr.latches.Release(g) })
	if err != nil {
		return fail(n.proposeErr(rr, err))
	}
	switch r := res.(type) {
	case *rpcpb.BatchResponse:
		return fail(r.Error)
	case splitResult:
		// Meta records: best effort now; balanceLoop repairs them later.
		if err := n.ensureMeta(ctx, r.left); err != nil {
			n.log.Warn("meta update after split", "range", r.left.RangeId, "err", err)
		}
		if err := n.ensureMeta(ctx, r.right); err != nil {
			n.log.Warn("meta update after split", "range", r.right.RangeId, "err", err)
		}
		at, _ := keys.StripUser(r.right.StartKey)
		n.log.Info("split a range", "node", fmt.Sprintf("n%d", n.NodeID()), "range", r.left.RangeId, "new_range", r.right.RangeId, "at", fmt.Sprintf("%q", at))
		return &rpcpb.SplitResponse{Left: r.left, Right: r.right}
	}
	return fail(pbErr(rpcpb.ErrorCode_INTERNAL, "unexpected split result %T", res))
}
