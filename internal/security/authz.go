package security

import (
	"bytes"
	"context"
	"fmt"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Level is who may call a method. Each level admits the callers of the
// levels above it in this list: a node may call everything, the admin
// user everything but the Internal service.
type Level int

const (
	// LevelPublic: anyone, with or without a certificate (health checks).
	LevelPublic Level = iota + 1
	// LevelUser: any user with a certificate signed by the cluster's CA.
	LevelUser
	// LevelAdmin: the admin user, or a node.
	LevelAdmin
	// LevelNode: nodes only (node-to-node RPCs).
	LevelNode
)

func (l Level) String() string {
	switch l {
	case LevelPublic:
		return "public"
	case LevelUser:
		return "user"
	case LevelAdmin:
		return "admin"
	case LevelNode:
		return "node"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// MethodLevels gives every gRPC method a node serves its Level. A method
// missing here is refused to everyone but a node (Authorize): a service
// added to the server without a line here fails closed, and
// TestEveryMethodHasALevel names it.
var MethodLevels = map[string]Level{
	healthpb.Health_Check_FullMethodName: LevelPublic,
	healthpb.Health_List_FullMethodName:  LevelPublic,
	healthpb.Health_Watch_FullMethodName: LevelPublic,

	// The data path. KV.Batch is checked request by request too
	// (authorizeBatch).
	rpcpb.KV_Batch_FullMethodName:       LevelUser,
	rpcpb.KV_RangeLookup_FullMethodName: LevelUser,
	rpcpb.KV_Timestamps_FullMethodName:  LevelUser,
	rpcpb.KV_ClusterInfo_FullMethodName: LevelUser,
	rpcpb.KV_NodeStatus_FullMethodName:  LevelUser,
	rpcpb.KV_Members_FullMethodName:     LevelUser,
	// Watch (client.DB.Watch): a stream of a range's committed changes.
	rpcpb.Feed_RangeFeed_FullMethodName: LevelUser,

	// Administration.
	rpcpb.KV_Bootstrap_FullMethodName: LevelAdmin,
	rpcpb.KV_Split_FullMethodName:     LevelAdmin,
	// Membership changes (canopy node add/decommission/remove) are
	// administrative; the member list is for any user.
	rpcpb.KV_AddNode_FullMethodName:          LevelAdmin,
	rpcpb.KV_ChangeMembership_FullMethodName: LevelAdmin,

	// The etcd v3 API (internal/etcdapi): the data path, leases and
	// watches for any user, like Canopy's own. Compact only marks a
	// revision (Canopy's GC removes versions), so any user too. Status
	// and the member list are read-only. The methods Canopy does not
	// implement (they answer Unimplemented) are the admin's.
	"/etcdserverpb.KV/Range":               LevelUser,
	"/etcdserverpb.KV/Put":                 LevelUser,
	"/etcdserverpb.KV/DeleteRange":         LevelUser,
	"/etcdserverpb.KV/Txn":                 LevelUser,
	"/etcdserverpb.KV/Compact":             LevelUser,
	"/etcdserverpb.Watch/Watch":            LevelUser,
	"/etcdserverpb.Lease/LeaseGrant":       LevelUser,
	"/etcdserverpb.Lease/LeaseRevoke":      LevelUser,
	"/etcdserverpb.Lease/LeaseKeepAlive":   LevelUser,
	"/etcdserverpb.Lease/LeaseTimeToLive":  LevelUser,
	"/etcdserverpb.Lease/LeaseLeases":      LevelUser,
	"/etcdserverpb.Cluster/MemberList":     LevelUser,
	"/etcdserverpb.Cluster/MemberAdd":      LevelAdmin,
	"/etcdserverpb.Cluster/MemberRemove":   LevelAdmin,
	"/etcdserverpb.Cluster/MemberUpdate":   LevelAdmin,
	"/etcdserverpb.Cluster/MemberPromote":  LevelAdmin,
	"/etcdserverpb.Maintenance/Status":     LevelUser,
	"/etcdserverpb.Maintenance/Alarm":      LevelAdmin,
	"/etcdserverpb.Maintenance/Defragment": LevelAdmin,
	"/etcdserverpb.Maintenance/Hash":       LevelAdmin,
	"/etcdserverpb.Maintenance/HashKV":     LevelAdmin,
	"/etcdserverpb.Maintenance/Snapshot":   LevelAdmin,
	"/etcdserverpb.Maintenance/MoveLeader": LevelAdmin,
	"/etcdserverpb.Maintenance/Downgrade":  LevelAdmin,

	// The hierarchy protocols: a client's part of a commit; the
	// validators' links between nodes.
	rpcpb.Hierarchy_Commit_FullMethodName: LevelUser,
	rpcpb.Hierarchy_Link_FullMethodName:   LevelNode,
	// Between nodes.
	rpcpb.Internal_Raft_FullMethodName:         LevelNode,
	rpcpb.Internal_RaftStream_FullMethodName:   LevelNode,
	rpcpb.Internal_Propose_FullMethodName:      LevelNode,
	rpcpb.Internal_Join_FullMethodName:         LevelNode,
	rpcpb.Internal_Ping_FullMethodName:         LevelNode,
	rpcpb.Internal_ReportDamage_FullMethodName: LevelNode,
	rpcpb.Snapshots_Send_FullMethodName:        LevelNode,
}

// userWritableSystemSpans are the system keys a user who is not the admin
// may write (plain or transactional): the transaction status table (with
// the STAGING records), the heartbeat records, which every client's
// transactions write, and the status encoding schedule, which a client
// extends when it begins a transaction past its valid-through. Every other system key (meta records, node
// records, the range-ID counter, the oracle's bound, the cluster's
// settings) is the admin's and the nodes'.
var userWritableSystemSpans = [][]byte{keys.StatusPrefix, keys.HeartbeatPrefix, keys.StatusSchedulePrefix}

// Authorize decides whether user may call method with req. user is the
// common name of the caller's verified certificate, "" if it presented
// none; admin is the node's admin user. It returns nil, or a gRPC status
// error: codes.Unauthenticated when a certificate is needed and none was
// presented, codes.PermissionDenied when the user may not do this. The
// message names the method, the user and who may.
func Authorize(method, user, admin string, req any) error {
	level, known := MethodLevels[method]
	if !known {
		level = LevelNode
	}
	if level == LevelPublic {
		return nil
	}
	if user == "" {
		return status.Errorf(codes.Unauthenticated,
			"%s needs a client certificate signed by the cluster's CA, and none was presented (use --certs-dir with a client certificate, see `canopy cert create-client`)", method)
	}
	if user == NodeUser {
		return nil
	}
	switch {
	case level == LevelNode && !known:
		return status.Errorf(codes.PermissionDenied, "%s has no authorization rule: only nodes may call it; user %q may not", method, user)
	case level == LevelNode:
		return status.Errorf(codes.PermissionDenied,
			"%s is a node-to-node RPC: it needs a node certificate (common name %q); user %q may not call it", method, NodeUser, user)
	case user == admin:
		return nil
	case level == LevelAdmin:
		return status.Errorf(codes.PermissionDenied,
			"%s is an administrative RPC: it needs the admin user %q; user %q may not call it", method, admin, user)
	}
	if b, ok := req.(*rpcpb.BatchRequest); ok {
		return authorizeBatch(b, user, admin)
	}
	return nil
}

// authorizeBatch refuses a batch of a user who is not the admin that
// writes a system key outside userWritableSystemSpans.
func authorizeBatch(b *rpcpb.BatchRequest, user, admin string) error {
	for _, ru := range b.GetRequests() {
		if ru.GetValue() == nil || !ru.IsWrite() {
			continue
		}
		written := [][]byte{ru.Key()}
		if c := ru.GetCommitOnePc(); c != nil {
			written = written[:0]
			for _, w := range c.GetWrites() {
				written = append(written, w.GetKey())
			}
		}
		for _, k := range written {
			if keys.IsUser(k) || userWritable(k) {
				continue
			}
			return status.Errorf(codes.PermissionDenied,
				"%s of system key %x (meta, node records or cluster settings) needs the admin user %q; user %q may write only user keys and transaction records",
				ru.Method(), k, admin, user)
		}
	}
	return nil
}

func userWritable(k []byte) bool {
	for _, p := range userWritableSystemSpans {
		if bytes.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// PeerUser returns the common name of the certificate the caller of an
// incoming RPC presented and the TLS handshake verified against the CA,
// or "" if it presented none (or the connection is not TLS).
func PeerUser(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return ""
	}
	return info.State.VerifiedChains[0][0].Subject.CommonName
}
