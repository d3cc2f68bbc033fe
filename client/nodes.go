package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// nodeDirectory knows the cluster's nodes (ID -> address, learned from
// ClusterInfo, RangeLookup and NOT_LEASEHOLDER hints) and holds one gRPC
// connection per address, created on first use.
//
// The seed addresses given to Open have no known node ID; they stay in the
// address list so that "any node" requests can use them.
type nodeDirectory struct {
	dialOpts []grpc.DialOption
	// clusterID, once known (Open sets it from ClusterInfo), goes with
	// every RPC as gRPC metadata: a node of another cluster refuses it
	// (rpcpb.IsClusterMismatch) instead of serving it.
	clusterID atomic.Pointer[string]

	mu struct {
		sync.Mutex
		// addrByID maps node IDs to addresses.
		addrByID map[uint64]string
		// addrs lists every known address once, seeds first. Invariant:
		// no duplicates.
		addrs []string
		// conns holds the open connections by address.
		conns  map[string]*grpc.ClientConn
		closed bool
	}
}

// messageBytesMax is the gRPC message size limit: the largest request a
// node accepts plus room for the envelope.
const messageBytesMax = keys.RequestBytesMax + 1<<20

func newNodeDirectory(seeds []string, tlsConfig *tls.Config, extra []grpc.DialOption) *nodeDirectory {
	d := &nodeDirectory{}
	creds := insecure.NewCredentials()
	if tlsConfig != nil {
		creds = credentials.NewTLS(tlsConfig.Clone())
	}
	d.dialOpts = append([]grpc.DialOption{
		grpc.WithChainUnaryInterceptor(d.identityInterceptor),
		grpc.WithChainStreamInterceptor(refusalStreamInterceptor),
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(messageBytesMax), grpc.MaxCallSendMsgSize(messageBytesMax)),
	}, append(rpc.DialOptions(), extra...)...)
	d.mu.addrByID = map[uint64]string{}
	d.mu.conns = map[string]*grpc.ClientConn{}
	for _, a := range seeds {
		d.addAddrLocked(a)
	}
	return d
}

func (d *nodeDirectory) addAddrLocked(a string) {
	for _, x := range d.mu.addrs {
		if x == a {
			return
		}
	}
	d.mu.addrs = append(d.mu.addrs, a)
}

// set records that node id listens on addr.
func (d *nodeDirectory) set(id uint64, addr string) {
	if id == 0 || addr == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.addrByID[id] = addr
	d.addAddrLocked(addr)
}

// update records node descriptors.
func (d *nodeDirectory) update(nodes []*rpcpb.NodeDescriptor) {
	for _, n := range nodes {
		d.set(n.GetNodeId(), n.GetAddress())
	}
}

// address returns the address of node id, if known.
func (d *nodeDirectory) address(id uint64) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.mu.addrByID[id]
	return a, ok
}

// anyAddress returns the i-th known address, cyclically.
func (d *nodeDirectory) anyAddress(i int) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.mu.addrs) == 0 {
		return ""
	}
	if i < 0 {
		i = -i
	}
	return d.mu.addrs[i%len(d.mu.addrs)]
}

// addressCount is the number of known addresses.
func (d *nodeDirectory) addressCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.mu.addrs)
}

var errClosed = fmt.Errorf("%w: client is closed", ErrUnavailable)

// client returns a KV client for addr, dialing on first use. grpc.NewClient
// does not connect; the first RPC does, so this never blocks.
func (d *nodeDirectory) client(addr string) (rpcpb.KVClient, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mu.closed {
		return nil, errClosed
	}
	if c, ok := d.mu.conns[addr]; ok {
		return rpcpb.NewKVClient(c), nil
	}
	c, err := grpc.NewClient(addr, d.dialOpts...)
	if err != nil {
		return nil, invalidArgf("address %q: %v", addr, err)
	}
	d.mu.conns[addr] = c
	return rpcpb.NewKVClient(c), nil
}

// conn returns the connection to addr that client's clients use.
func (d *nodeDirectory) conn(addr string) (*grpc.ClientConn, error) {
	if _, err := d.client(addr); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.mu.conns[addr]
	if !ok {
		return nil, errClosed
	}
	return c, nil
}

// feedClient returns a Feed client for addr (watch.go), on the same
// connection as client's.
func (d *nodeDirectory) feedClient(addr string) (rpcpb.FeedClient, error) {
	c, err := d.conn(addr)
	if err != nil {
		return nil, err
	}
	return rpcpb.NewFeedClient(c), nil
}

// hierarchyClient returns a Hierarchy client for addr (txn_hierarchy.go),
// on the same connection as client's.
func (d *nodeDirectory) hierarchyClient(addr string) (rpcpb.HierarchyClient, error) {
	c, err := d.conn(addr)
	if err != nil {
		return nil, err
	}
	return rpcpb.NewHierarchyClient(c), nil
}

// outgoing adds the cluster's ID to the context of a streaming RPC (the
// unary interceptor does it for the others).
func (d *nodeDirectory) outgoing(ctx context.Context) context.Context {
	if id := d.clusterID.Load(); id != nil {
		ctx = metadata.AppendToOutgoingContext(ctx, rpcpb.MetadataClusterID, *id)
	}
	return ctx
}

// setClusterID makes every later RPC name the cluster id.
func (d *nodeDirectory) setClusterID(id string) {
	if id != "" {
		d.clusterID.Store(&id)
	}
}

// identityInterceptor adds the cluster's ID to an outgoing RPC, and makes
// a node's refusal of the caller's credentials an ErrPermission that ends
// the request at once (a *stopError: no other node would answer
// otherwise, and nothing was executed).
func (d *nodeDirectory) identityInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if id := d.clusterID.Load(); id != nil {
		ctx = metadata.AppendToOutgoingContext(ctx, rpcpb.MetadataClusterID, *id)
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if rpcpb.IsAuthRefusal(err) {
		return permissionError(cc.Target(), err)
	}
	return err
}

// permissionError is a node's refusal of the caller's credentials (gRPC
// Unauthenticated or PermissionDenied from the node at target) as an
// ErrPermission that ends the request at once, without gRPC's framing.
func permissionError(target string, err error) error {
	return &stopError{fmt.Errorf("%w: node at %s: %s", ErrPermission, target, status.Convert(err).Message())}
}

// refusalStreamInterceptor does for streaming RPCs (Watch's RangeFeed)
// what identityInterceptor does for unary ones: a refusal of the
// caller's credentials, when the stream is made or on its first
// receive (where a server-side interceptor's refusal of a stream
// arrives), becomes permissionError.
func refusalStreamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if rpcpb.IsAuthRefusal(err) {
		return nil, permissionError(cc.Target(), err)
	}
	if err != nil {
		return nil, err
	}
	return &refusalStream{ClientStream: s, target: cc.Target()}, nil
}

// refusalStream is a client stream whose receives turn refusals into
// permissionError.
type refusalStream struct {
	grpc.ClientStream
	target string
}

// RecvMsg implements grpc.ClientStream.
func (s *refusalStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if rpcpb.IsAuthRefusal(err) {
		return permissionError(s.target, err)
	}
	return err
}

func (d *nodeDirectory) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mu.closed = true
	var errs []error
	for a, c := range d.mu.conns {
		errs = append(errs, c.Close())
		delete(d.mu.conns, a)
	}
	return errors.Join(errs...)
}
