package kvserver

import (
	"context"
	"fmt"
	"time"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Health (docs/OPERATIONS.md, "Metrics and health"). A node is live while
// its process serves (HTTP GET /health answers 200). It is ready
// (GET /health?ready=1, and the grpc.health.v1 service) when it can serve
// its share of the cluster:
//
//  1. it is initialized (canopy init ran, or it joined a cluster) and its
//     store is not found damaged, and it is not stopping;
//  2. it is a member of the cluster: its ID is in its list of the
//     cluster's nodes;
//  3. it has heard from a majority of the cluster's nodes (itself
//     included) within an election timeout (the coalesced heartbeat of
//     liveness.go);
//  4. it is caught up: every replica on it has its first snapshot and
//     knows its range's leader.
//
// Readiness is a moment's view for load balancers and orchestrators, not a
// guarantee: a request may still meet a leader change. It is computed on
// each HTTP request and each gRPC Check, and pushed to gRPC Watch streams
// every HealthUpdateInterval.

// HealthUpdateInterval is how often the grpc.health.v1 serving status is
// recomputed for Watch streams (a Check recomputes it at once).
const HealthUpdateInterval = time.Second

// healthServices are the grpc.health.v1 service names whose status follows
// readiness: "" (the server as a whole, what Kubernetes' gRPC probe asks
// by default) and the KV service clients use.
var healthServices = []string{"", rpcpb.KV_ServiceDesc.ServiceName}

// notReadyReason returns why the node is not ready, "" if it is.
func (n *Node) notReadyReason() string {
	select {
	case <-n.stopc:
		return "the node is stopping"
	default:
	}
	if n.failed() {
		return "the store was found damaged: " + n.Err().Error()
	}
	self := n.NodeID()
	if self == 0 {
		return "not initialized: run `canopy init` (or wait for the node to join its cluster)"
	}
	nodes := n.nodeList()
	member, heard := false, 0
	for _, nd := range nodes {
		switch {
		case nd.NodeId == self:
			member = true
			heard++
		case n.liveness.heardLately(nd.NodeId):
			heard++
		}
	}
	if !member {
		return fmt.Sprintf("n%d is not in its list of the cluster's nodes", self)
	}
	if quorum := len(nodes)/2 + 1; heard < quorum {
		return fmt.Sprintf("heard lately from %d of the cluster's %d nodes (itself included); a majority is %d", heard, len(nodes), quorum)
	}
	// Only the active set (node.go, tick): a replica outside it is
	// quiescent, and a quiescent replica has its descriptor and follows
	// (or is) a known leader (replica: a follower quiesces only on its
	// leader's quiesce heartbeat, at the leader's commit index). Readiness
	// is computed every second (gRPC health watchers); looking at each of
	// 10,000 idle replicas each time was a fifth of an idle node's CPU
	// (sorting them, before that, half).
	for _, rr := range n.activeReplicas() {
		if rr.sm.Desc() == nil {
			return fmt.Sprintf("the replica of r%d waits for its first snapshot", rr.r.RangeID())
		}
		if rr.r.Status().Leader == 0 {
			return fmt.Sprintf("r%d has no known leader", rr.r.RangeID())
		}
	}
	return ""
}

// activeReplicas returns the replicas of the active set: every replica
// that is not quiescent is in it (markActive), and perhaps some that
// quiesced since the last tick.
func (n *Node) activeReplicas() []*rangeReplica {
	n.activeMu.Lock()
	n.mu.RLock()
	out := make([]*rangeReplica, 0, len(n.active))
	for id := range n.active {
		if rr := n.mu.replicas[id]; rr != nil {
			out = append(out, rr)
		}
	}
	n.mu.RUnlock()
	n.activeMu.Unlock()
	return out
}

// heardLately reports whether nodeID was heard from in the last deadTicks
// ticks. Unlike isLive, a peer never heard from is not.
func (l *liveness) heardLately(nodeID uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.mu.heard[nodeID]
	return ok && l.mu.now-t < l.deadTicks
}

// healthService is grpc-go's health service, whose Check first brings the
// status up to date.
type healthService struct {
	*health.Server
	n *Node
}

// Check implements healthpb.HealthServer.
func (h *healthService) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.n.updateHealth()
	return h.Server.Check(ctx, req)
}

// updateHealth sets the gRPC serving status from readiness.
func (n *Node) updateHealth() {
	st := healthpb.HealthCheckResponse_SERVING
	if n.notReadyReason() != "" {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	for _, s := range healthServices {
		n.ops.health.SetServingStatus(s, st)
	}
}
