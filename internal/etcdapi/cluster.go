package etcdapi

import (
	"context"
	"fmt"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// clusterServer is enough of etcd's Cluster service for `etcdctl member
// list`: Canopy's members are its nodes. Membership changes go through
// `canopy node` (the other methods answer Unimplemented).
type clusterServer struct {
	pb.UnimplementedClusterServer
	s *Server
}

func (c *clusterServer) url(addr string) string {
	if c.s.opts.TLS {
		return "https://" + addr
	}
	return "http://" + addr
}

func (c *clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	db, err := c.s.db(ctx)
	if err != nil {
		return nil, err
	}
	ms, err := db.Members(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	ts, err := db.Timestamp(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pb.MemberListResponse{Header: c.s.header(int64(ts))}
	for _, m := range ms {
		n := m.GetNode()
		if n.GetMembership() == rpcpb.NodeMembership_REMOVED {
			continue
		}
		u := c.url(n.GetAddress())
		resp.Members = append(resp.Members, &pb.Member{ID: n.GetNodeId(), Name: fmt.Sprintf("n%d", n.GetNodeId()),
			PeerURLs: []string{u}, ClientURLs: []string{u}})
	}
	return resp, nil
}

// maintenanceServer is enough of etcd's Maintenance service for `etcdctl
// endpoint status`: Status describes the node answering. The other
// methods (defragment, snapshot, hashes, alarms, leader moves) answer
// Unimplemented; Canopy has its own tools for each (docs/ETCD-API.md).
type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	s *Server
}

// Status reports the node: its store's size, and for "leader", Raft term
// and indexes, the Raft group of the first range it holds (Canopy has a
// Raft group per range, not one per cluster).
func (m *maintenanceServer) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	db, err := m.s.db(ctx)
	if err != nil {
		return nil, err
	}
	ns, err := db.NodeStatus(ctx, m.s.opts.Address)
	if err != nil {
		return nil, toStatus(err)
	}
	ts, err := db.Timestamp(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pb.StatusResponse{Header: m.s.header(int64(ts)), Version: ServerVersion, StorageVersion: ServerVersion,
		DbSize: int64(ns.GetStoreBytes()), DbSizeInUse: int64(ns.GetStoreBytes())}
	var first *rpcpb.RangeStatus
	for _, rs := range ns.GetRanges() {
		if first == nil || rs.GetRange().GetRangeId() < first.GetRange().GetRangeId() {
			first = rs
		}
	}
	if first != nil {
		resp.Leader = first.GetLeaderNodeId()
		resp.RaftTerm = first.GetRaftTerm()
		resp.RaftIndex = first.GetRaftCommittedIndex()
		resp.RaftAppliedIndex = first.GetRaftAppliedIndex()
		resp.Header.RaftTerm = first.GetRaftTerm()
	}
	return resp, nil
}
