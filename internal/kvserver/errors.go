package kvserver

import (
	"errors"
	"fmt"

	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

func pbErr(code rpcpb.ErrorCode, format string, args ...any) *rpcpb.Error {
	return &rpcpb.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func pbIntents(in []mvcc.Intent) []*rpcpb.Intent {
	out := make([]*rpcpb.Intent, 0, len(in))
	for _, i := range in {
		out = append(out, &rpcpb.Intent{Key: i.Key, Txn: &rpcpb.TxnMeta{StartTs: i.Txn.StartTs, HeartbeatKey: i.Txn.HeartbeatKey}})
	}
	return out
}

// evalErr maps an evaluation error to a wire error. Errors that are not a
// known conflict are internal: evaluation of valid input does not fail.
func evalErr(err error) *rpcpb.Error {
	var wc *mvcc.WriteConflictError
	var ie *mvcc.IntentError
	var rc *mvcc.ReadConflictError
	switch {
	case errors.As(err, &wc):
		e := pbErr(rpcpb.ErrorCode_WRITE_CONFLICT, "%v", err)
		e.ExistingTs = wc.ExistingTs
		if wc.Intent != nil {
			e.Intents = pbIntents([]mvcc.Intent{*wc.Intent})
		}
		return e
	case errors.As(err, &ie):
		e := pbErr(rpcpb.ErrorCode_INTENT_FOUND, "%v", err)
		e.Intents = pbIntents(ie.Intents)
		return e
	case errors.As(err, &rc):
		e := pbErr(rpcpb.ErrorCode_READ_CONFLICT, "%v", err)
		e.ExistingTs = rc.Ts
		if rc.Intent != nil {
			e.Intents = pbIntents([]mvcc.Intent{*rc.Intent})
		}
		return e
	case errors.Is(err, mvcc.ErrInvalidArgument):
		return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "%v", err)
	}
	return pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err)
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
