package kvserver

import (
	"errors"

	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

func pbErr(code rpcpb.ErrorCode, format string, args ...any) *rpcpb.Error {
	return rpcpb.NewError(code, format, args...)
}

// proposeErr maps a replica error to a wire error.
func (n *Node) proposeErr(rr *rangeReplica, err error) *rpcpb.Error {
	switch {
	case errors.Is(err, replica.ErrNotLeader):
		return n.notLeaseholder(rr)
	case errors.Is(err, replica.ErrAmbiguous):
		return pbErr(rpcpb.ErrorCode_AMBIGUOUS, "range r%d: %v", rr.r.RangeID(), err)
	}
	// ErrProposalDropped, ErrStopped: nothing applied; retry elsewhere.
	return pbErr(rpcpb.ErrorCode_UNAVAILABLE, "range r%d: %v", rr.r.RangeID(), err)
}

func (n *Node) notLeaseholder(rr *rangeReplica) *rpcpb.Error {
	st := rr.r.Status()
	e := pbErr(rpcpb.ErrorCode_NOT_LEASEHOLDER, "range r%d: node n%d is not the leaseholder (leader: n%d)", st.RangeID, n.NodeID(), st.Leader)
	e.LeaseholderHint = st.Leader
	e.LeaseholderAddress = n.nodeAddress(st.Leader)
	e.Range = rr.sm.Desc()
	return e
}
