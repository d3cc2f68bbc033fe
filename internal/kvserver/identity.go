package kvserver

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Cluster identity on the wire. Every RPC a node sends carries its
// cluster's ID and its node ID as gRPC metadata, and so does every RPC of
// a client that has learnt the cluster's ID (client.Open). A node refuses,
// with codes.FailedPrecondition and a message naming both clusters, any
// RPC that names another cluster, and logs the refusal; the sending node
// logs the refusal it gets. So a store of another cluster started on one
// of this cluster's addresses never has its votes, acknowledgements or
// requests counted, and the operator is told on both sides.
//
// RPCs without the metadata (a client's first ClusterInfo, `canopy init`,
// a node not yet initialized) are not checked: they cannot name a cluster.
const (
	// PeerIdentityCheckMax bounds the check of a restarted node's peers
	// (checkPeersIdentity).
	PeerIdentityCheckMax = time.Minute
	// identityLogInterval bounds how often one refusal is logged.
	identityLogInterval = 10 * time.Second
)

// identityLog rate-limits the log lines of refusals, by peer.
type identityLog struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (l *identityLog) due(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = map[string]time.Time{}
	}
	now := time.Now()
	if t, ok := l.last[key]; ok && now.Sub(t) < identityLogInterval {
		return false
	}
	l.last[key] = now
	return true
}

// checkIdentity refuses an incoming RPC that names another cluster.
func (n *Node) checkIdentity(ctx context.Context, method string) error {
	theirs := incoming(ctx, rpcpb.MetadataClusterID)
	ours := n.settings().GetClusterId()
	if theirs != "" && theirs == ours {
		// A node removed from the cluster (membership.go) is no longer
		// one of its nodes: its Raft messages and requests are refused.
		if id, err := strconv.ParseUint(incoming(ctx, rpcpb.MetadataFromNode), 10, 64); err == nil && n.removedPeer(id) {
			if n.identityLog.due("removed " + strconv.FormatUint(id, 10)) {
				n.log.Warn("refused an RPC from a removed node: stop it and wipe its store", "from", id, "method", method)
			}
			return status.Errorf(codes.FailedPrecondition, "%s: node n%d was removed from cluster %s", rpcpb.NodeRemovedPrefix, id, ours)
		}
		return nil
	}
	if theirs == "" || ours == "" {
		return nil
	}
	from := "a client"
	if id := incoming(ctx, rpcpb.MetadataFromNode); id != "" {
		from = "node n" + id
	}
	if n.identityLog.due("in " + from + " " + theirs) {
		n.log.Error("refused an RPC from another cluster: a store of another cluster is running on one of this cluster's addresses, or a client is pointed at the wrong cluster",
			"from", from, "their_cluster", theirs, "our_cluster", ours, "method", method)
	}
	return status.Errorf(codes.FailedPrecondition, "%s: node n%d at %s belongs to cluster %s; %s belongs to cluster %s",
		rpcpb.ClusterMismatchPrefix, n.NodeID(), n.Addr(), ours, from, theirs)
}

// incoming is the first value of the incoming RPC metadata key (lower
// case), "" if none. Unlike metadata.FromIncomingContext it copies nothing
// but the one key's values, which matters on every request.
func incoming(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// identityUnary is the server's unary interceptor of checkIdentity.
func (n *Node) identityUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := n.checkIdentity(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

// identityStream is the server's stream interceptor of checkIdentity.
func (n *Node) identityStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := n.checkIdentity(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

// outgoing adds this node's identity to an outgoing RPC's metadata.
func (n *Node) outgoing(ctx context.Context) context.Context {
	id := n.settings().GetClusterId()
	if id == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, rpcpb.MetadataClusterID, id, rpcpb.MetadataFromNode, strconv.FormatUint(n.NodeID(), 10))
}

// noteRefusal logs, rate-limited, that the node at target refused us.
func (n *Node) noteRefusal(target string, err error) {
	if rpcpb.IsClusterMismatch(err) && n.identityLog.due("out "+target) {
		n.log.Error("a peer refused this node: it belongs to another cluster", "peer", target, "err", status.Convert(err).Message())
	}
}

// identityDialOptions are the interceptors of a node's outgoing
// connections: identity metadata out, refusals logged.
func (n *Node) identityDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			err := invoker(n.outgoing(ctx), method, req, reply, cc, opts...)
			if err != nil {
				n.noteRefusal(cc.Target(), err)
			}
			return err
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(n.outgoing(ctx), desc, cc, method, opts...)
			if err != nil {
				n.noteRefusal(cc.Target(), err)
				return nil, err
			}
			return &refusalStream{ClientStream: s, n: n, target: cc.Target()}, nil
		}),
	}
}

// refusalStream logs a refusal that ends a client stream.
type refusalStream struct {
	grpc.ClientStream
	n      *Node
	target string
}

func (s *refusalStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.n.noteRefusal(s.target, err)
	}
	return err
}

// checkPeersIdentity runs once at the start of a node with an initialized
// store: it asks each other node of its cluster (by the addresses its
// store knows) to check its identity. If a majority of the cluster's
// nodes refuse it as belonging to another cluster, the store is the
// foreign one: the node stops serving and fails with an error naming both
// clusters (Node.Failed). Peers that do not answer prove nothing; the
// check gives up on them when ctx ends.
func (n *Node) checkPeersIdentity(ctx context.Context) {
	self := n.NodeID()
	nodes := n.nodeList()
	type answer struct {
		addr string
		err  error
	}
	answers := make(chan answer, len(nodes))
	peers := 0
	for _, nd := range nodes {
		if nd.NodeId == self {
			continue
		}
		peers++
		go func(nd *rpcpb.NodeDescriptor) {
			c, err := n.conn(nd.Address)
			if err != nil {
				answers <- answer{nd.Address, err}
				return
			}
			_, err = rpcpb.NewInternalClient(c).Ping(ctx, &rpcpb.PingRequest{}, grpc.WaitForReady(true))
			answers <- answer{nd.Address, err}
		}(nd)
	}
	refused, removed := 0, 0
	var example error
	for i := 0; i < peers; i++ {
		a := <-answers
		if rpcpb.IsClusterMismatch(a.err) {
			refused++
			example = fmt.Errorf("%s: %s", a.addr, status.Convert(a.err).Message())
		}
		if rpcpb.IsNodeRemoved(a.err) {
			removed++
		}
	}
	if removed > 0 {
		n.refuseToServe(fmt.Errorf("kvserver: node n%d (store %s) was removed from cluster %s (canopy node remove): it takes no part in it any more; to use this machine again, wipe the store and start it as a new node (docs/OPERATIONS.md, \"Membership changes\")",
			self, n.cfg.StoreDir, n.settings().GetClusterId()))
		return
	}
	if refused > len(nodes)/2 {
		n.refuseToServe(fmt.Errorf("kvserver: the store %s belongs to cluster %s, but %d of the other %d nodes of its cluster refuse it as a node of another cluster (%v); either this store is not this node's (start the node with its own cluster's store) or --join names another cluster's nodes (check --join); the store is left as it is",
			n.cfg.StoreDir, n.settings().GetClusterId(), refused, peers, example))
	}
}

// refuseToServe makes the node fail (Node.Failed, Node.Err) with err, for
// a reason other than a damaged store; it drops Raft messages from then
// on, and the caller stops it.
func (n *Node) refuseToServe(err error) {
	n.failure.once.Do(func() {
		n.log.Error("refusing to serve", "err", err)
		n.failure.err = err
		close(n.failure.done)
	})
}

// fromNode reports whether the incoming RPC of ctx was sent by a node (it
// carries the sender's node ID), not by a client.
func fromNode(ctx context.Context) bool {
	return incoming(ctx, rpcpb.MetadataFromNode) != ""
}
