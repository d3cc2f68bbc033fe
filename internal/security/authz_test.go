package security

import (
	"testing"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	etcdpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Every method of every service a node serves has a level.
func TestEveryMethodHasALevel(t *testing.T) {
	for _, sd := range []struct {
		name    string
		methods []string
	}{
		{rpcpb.KV_ServiceDesc.ServiceName, names(rpcpb.KV_ServiceDesc.Methods, rpcpb.KV_ServiceDesc.Streams)},
		{rpcpb.Internal_ServiceDesc.ServiceName, names(rpcpb.Internal_ServiceDesc.Methods, rpcpb.Internal_ServiceDesc.Streams)},
		{rpcpb.Feed_ServiceDesc.ServiceName, names(rpcpb.Feed_ServiceDesc.Methods, rpcpb.Feed_ServiceDesc.Streams)},
		{rpcpb.Snapshots_ServiceDesc.ServiceName, names(rpcpb.Snapshots_ServiceDesc.Methods, rpcpb.Snapshots_ServiceDesc.Streams)},
		{healthpb.Health_ServiceDesc.ServiceName, names(healthpb.Health_ServiceDesc.Methods, healthpb.Health_ServiceDesc.Streams)},
	} {
		for _, m := range sd.methods {
			if _, ok := MethodLevels["/"+sd.name+"/"+m]; !ok {
				t.Errorf("/%s/%s has no level in MethodLevels", sd.name, m)
			}
		}
	}
	// The etcd v3 API's services (internal/etcdapi registers these
	// five): their descriptors are unexported, so list a server's.
	g := grpc.NewServer()
	etcdpb.RegisterKVServer(g, &etcdpb.UnimplementedKVServer{})
	etcdpb.RegisterWatchServer(g, &etcdpb.UnimplementedWatchServer{})
	etcdpb.RegisterLeaseServer(g, &etcdpb.UnimplementedLeaseServer{})
	etcdpb.RegisterClusterServer(g, &etcdpb.UnimplementedClusterServer{})
	etcdpb.RegisterMaintenanceServer(g, &etcdpb.UnimplementedMaintenanceServer{})
	n := 0
	for name, info := range g.GetServiceInfo() {
		for _, m := range info.Methods {
			n++
			if _, ok := MethodLevels["/"+name+"/"+m.Name]; !ok {
				t.Errorf("/%s/%s has no level in MethodLevels", name, m.Name)
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d etcd methods listed", n)
	}
}

func TestAuthorize(t *testing.T) {
	put := func(k []byte) *rpcpb.BatchRequest {
		return &rpcpb.BatchRequest{Requests: []*rpcpb.RequestUnion{{Value: &rpcpb.RequestUnion_PlainPut{PlainPut: &rpcpb.PlainPutRequest{Key: k}}}}}
	}
	get := func(k []byte) *rpcpb.BatchRequest {
		return &rpcpb.BatchRequest{Requests: []*rpcpb.RequestUnion{{Value: &rpcpb.RequestUnion_PlainGet{PlainGet: &rpcpb.PlainGetRequest{Key: k}}}}}
	}
	onePC := &rpcpb.BatchRequest{Requests: []*rpcpb.RequestUnion{{Value: &rpcpb.RequestUnion_CommitOnePc{CommitOnePc: &rpcpb.CommitOnePCRequest{
		Writes: []*rpcpb.OnePCWrite{{Key: keys.UserKey([]byte("a"))}, {Key: keys.RangeIDKey}}}}}}}
	settings := []byte{0x00, 'b', 's'}
	for _, tc := range []struct {
		method, user string
		req          any
		want         codes.Code
	}{
		{healthpb.Health_Check_FullMethodName, "", nil, codes.OK},
		{rpcpb.KV_Batch_FullMethodName, "", put(keys.UserKey([]byte("a"))), codes.Unauthenticated},
		{rpcpb.KV_ClusterInfo_FullMethodName, "", nil, codes.Unauthenticated},
		{rpcpb.KV_Bootstrap_FullMethodName, "", nil, codes.Unauthenticated},
		{rpcpb.Internal_Raft_FullMethodName, "", nil, codes.Unauthenticated},
		{rpcpb.KV_ClusterInfo_FullMethodName, "alice", nil, codes.OK},
		{rpcpb.Feed_RangeFeed_FullMethodName, "alice", nil, codes.OK},
		{rpcpb.Feed_RangeFeed_FullMethodName, "", nil, codes.Unauthenticated},
		{rpcpb.KV_Batch_FullMethodName, "alice", put(keys.StatusKey([]byte{1})), codes.OK},
		{rpcpb.KV_Batch_FullMethodName, "alice", put(keys.HeartbeatKey(7)), codes.OK},
		{rpcpb.KV_Batch_FullMethodName, "alice", get(settings), codes.OK},
		{rpcpb.KV_Batch_FullMethodName, "alice", put(settings), codes.PermissionDenied},
		{rpcpb.KV_Batch_FullMethodName, "alice", put(keys.MetaKey(keys.MaxKey)), codes.PermissionDenied},
		{rpcpb.KV_Batch_FullMethodName, "alice", onePC, codes.PermissionDenied},
		{rpcpb.KV_Batch_FullMethodName, "root", put(settings), codes.OK},
		{rpcpb.KV_Split_FullMethodName, "alice", nil, codes.PermissionDenied},
		{rpcpb.KV_Bootstrap_FullMethodName, "alice", nil, codes.PermissionDenied},
		{rpcpb.KV_Split_FullMethodName, "root", nil, codes.OK},
		{rpcpb.KV_Bootstrap_FullMethodName, "root", nil, codes.OK},
		{rpcpb.KV_Split_FullMethodName, NodeUser, nil, codes.OK},
		{rpcpb.Internal_RaftStream_FullMethodName, "root", nil, codes.PermissionDenied},
		{rpcpb.Internal_Join_FullMethodName, "alice", nil, codes.PermissionDenied},
		{rpcpb.Internal_Join_FullMethodName, NodeUser, nil, codes.OK},
		{rpcpb.Snapshots_Send_FullMethodName, "root", nil, codes.PermissionDenied},
		{rpcpb.Snapshots_Send_FullMethodName, NodeUser, nil, codes.OK},
		{"/canopy.Unknown/Method", "root", nil, codes.PermissionDenied},
		{"/canopy.Unknown/Method", NodeUser, nil, codes.OK},
	} {
		err := Authorize(tc.method, tc.user, AdminUserDefault, tc.req)
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s by %q: %v (%v), want %v", tc.method, tc.user, got, err, tc.want)
		}
	}
	// Another admin user: root is then an ordinary user.
	if err := Authorize(rpcpb.KV_Split_FullMethodName, "root", "ops", nil); status.Code(err) != codes.PermissionDenied {
		t.Errorf("root with admin user ops: %v", err)
	}
	if err := Authorize(rpcpb.KV_Split_FullMethodName, "ops", "ops", nil); err != nil {
		t.Errorf("ops with admin user ops: %v", err)
	}
}

func names(ms []grpcMethod, ss []grpcStream) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.MethodName)
	}
	for _, s := range ss {
		out = append(out, s.StreamName)
	}
	return out
}

type (
	grpcMethod = grpc.MethodDesc
	grpcStream = grpc.StreamDesc
)
