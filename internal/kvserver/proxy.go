package kvserver

import (
	"context"
	"errors"
	"time"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"google.golang.org/grpc/metadata"
)

// Proxying (issue 13, item 7, case b): a client that cannot reach a
// range's leaseholder while the nodes still reach each other (a cut
// between the client and one node) sends its batch to another replica
// with the ProxyHeader metadata. A node that is not the leaseholder but
// knows who is then forwards the batch there and returns the answer, once
// (the forwarded call carries no header), instead of NOT_LEASEHOLDER,
// which would send the client back to the node it cannot reach. As
// CockroachDB's proxy requests (v24.1) for partial partitions.
//
// A forwarded write whose forwarding fails in transport may have been
// applied: the answer is AMBIGUOUS; a read's is UNAVAILABLE.

// ProxyHeader is the gRPC metadata key by which a client asks for a batch
// to be forwarded to the leaseholder.
const ProxyHeader = "canopy-proxy"

func wantsProxy(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, ProxyHeader)) > 0
}

// errLeaseholderNotLive ends a forward whose target stopped being live.
var errLeaseholderNotLive = errors.New("it stopped being live while the batch was forwarded")

// proxyBatch forwards req to node leader and returns its answer.
//
// A leaseholder this node has not heard from for an election timeout
// (liveness.go: stopped, or cut off from the nodes too) is not waited
// on: the batch is refused as UNAVAILABLE at once, and a forward under way
// ends as soon as the leaseholder stops being live. Before, a client that
// gave up on a stopped leaseholder (its probe, client/probe.go) and asked
// another replica to forward had that replica wait on the stopped node
// for RequestTimeout (10 s), while the range elected a new leader within
// an election timeout: no transaction completed during a whole 5 s pause.
func (n *Node) proxyBatch(ctx context.Context, req *rpcpb.BatchRequest, leader uint64) *rpcpb.BatchResponse {
	fail := func(e *rpcpb.Error) *rpcpb.BatchResponse { return &rpcpb.BatchResponse{Error: e} }
	if !n.liveness.isLive(leader) {
		return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "range r%d: the leaseholder n%d has not been heard from for %d ticks: not forwarding",
			req.RangeId, leader, n.liveness.silentTicks(leader)))
	}
	kv, err := n.kvClient(leader)
	if err != nil {
		return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "range r%d: forwarding to the leaseholder n%d: %v", req.RangeId, leader, err))
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(n.cfg.TickInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if !n.liveness.isLive(leader) {
					stop(errLeaseholderNotLive)
					return
				}
			}
		}
	}()
	resp, err := kv.Batch(ctx, req) // the connection adds this node's identity (identity.go)
	if err != nil {
		why := err.Error()
		if context.Cause(ctx) == errLeaseholderNotLive {
			why = errLeaseholderNotLive.Error()
		}
		if req.Requests[0].IsWrite() {
			return fail(pbErr(rpcpb.ErrorCode_AMBIGUOUS, "range r%d: forwarded to the leaseholder n%d, which did not answer: %s", req.RangeId, leader, why))
		}
		return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "range r%d: forwarding to the leaseholder n%d: %s", req.RangeId, leader, why))
	}
	return resp
}
