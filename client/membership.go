package client

import (
	"context"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// Members returns the cluster's node records (address, membership) with
// the number of replicas each node holds, as range 1's meta records say.
func (db *DB) Members(ctx context.Context) ([]*rpcpb.MemberInfo, error) {
	var out []*rpcpb.MemberInfo
	err := db.sender.anyNode(ctx, "members", func(ctx context.Context, kv rpcpb.KVClient) (*rpcpb.Error, error) {
		resp, err := kv.Members(ctx, &rpcpb.MembersRequest{})
		if err != nil {
			return nil, err
		}
		if pe := resp.GetError(); pe.GetCode() != rpcpb.ErrorCode_OK {
			return pe, nil
		}
		out = resp.Members
		return nil, nil
	})
	return out, publicError(err)
}

// AddNode makes the node at address, started with an empty store, a
// member of the cluster, and returns its node ID. (A node started with
// --join naming a running cluster's nodes joins by itself.)
func (db *DB) AddNode(ctx context.Context, address string) (uint64, error) {
	var id uint64
	err := db.sender.anyNode(ctx, "add node", func(ctx context.Context, kv rpcpb.KVClient) (*rpcpb.Error, error) {
		resp, err := kv.AddNode(ctx, &rpcpb.AddNodeRequest{Address: address, Deliver: true})
		if err != nil {
			return nil, err
		}
		if pe := resp.GetError(); pe.GetCode() != rpcpb.ErrorCode_OK {
			return pe, nil
		}
		id = resp.GetJoin().GetNodeId()
		return nil, nil
	})
	return id, publicError(err)
}

// ChangeMembership sets node nodeID's membership: DECOMMISSIONING moves
// its replicas and leases to other nodes, ACTIVE stops that, REMOVED
// (refused while it still holds replicas) takes it out for good.
func (db *DB) ChangeMembership(ctx context.Context, nodeID uint64, m rpcpb.NodeMembership) (*rpcpb.NodeRecord, error) {
	var out *rpcpb.NodeRecord
	err := db.sender.anyNode(ctx, "change membership", func(ctx context.Context, kv rpcpb.KVClient) (*rpcpb.Error, error) {
		resp, err := kv.ChangeMembership(ctx, &rpcpb.ChangeMembershipRequest{NodeId: nodeID, Membership: m})
		if err != nil {
			return nil, err
		}
		if pe := resp.GetError(); pe.GetCode() != rpcpb.ErrorCode_OK {
			return pe, nil
		}
		out = resp.Node
		return nil, nil
	})
	return out, publicError(err)
}
