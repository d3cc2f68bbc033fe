package kvserver

import (
	"context"

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
	md, ok := metadata.FromIncomingContext(ctx)
	return ok && len(md.Get(ProxyHeader)) > 0
}

// proxyBatch forwards req to node leader and returns its answer.
func (n *Node) proxyBatch(ctx context.Context, req *rpcpb.BatchRequest, leader uint64) *rpcpb.BatchResponse {
	fail := func(e *rpcpb.Error) *rpcpb.BatchResponse { return &rpcpb.BatchResponse{Error: e} }
	kv, err := n.kvClient(leader)
	if err != nil {
		return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "range r%d: forwarding to the leaseholder n%d: %v", req.RangeId, leader, err))
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	resp, err := kv.Batch(ctx, req) // the connection adds this node's identity (identity.go)
	if err != nil {
		if req.Requests[0].IsWrite() {
			return fail(pbErr(rpcpb.ErrorCode_AMBIGUOUS, "range r%d: forwarded to the leaseholder n%d, which did not answer: %v", req.RangeId, leader, err))
		}
		return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "range r%d: forwarding to the leaseholder n%d: %v", req.RangeId, leader, err))
	}
	return resp
}
