package kvserver_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/testcluster"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestRefusedSnapshotIsReported checks that a node refusing a snapshot
// for a range it does not hold yet, because the span overlaps a replica
// that has still to apply the split creating that range, says so to the
// sender (an error from the Raft RPC, which the sender's transport reports
// to Raft as a failed snapshot). Silently dropped, such a snapshot left the
// sender's Raft leader waiting for it forever, and the replica the split
// later created on the receiving node never caught up (found by the I5
// check of the list-append and bank tests: a right-hand range stuck at
// its initial index on one node).
func TestRefusedSnapshotIsReported(t *testing.T) {
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir(), Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := c.Node(0)
	hdr, err := proto.Marshal(&rpcpb.RangeState{Range: &rpcpb.RangeDescriptor{
		RangeId: 999, StartKey: keys.UserKey([]byte("m")), EndKey: keys.UserKey([]byte("n")),
		Replicas: []*rpcpb.ReplicaDescriptor{{NodeId: n.NodeID()}}}})
	if err != nil {
		t.Fatal(err)
	}
	data := append(binary.AppendUvarint(nil, uint64(len(hdr))), hdr...)
	msg := raftpb.Message{Type: raftpb.MsgSnap, To: n.NodeID(), From: 7, Term: 9,
		Snapshot: &raftpb.Snapshot{Data: data, Metadata: raftpb.SnapshotMetadata{Index: 20, Term: 9,
			ConfState: raftpb.ConfState{Voters: []uint64{n.NodeID()}}}}}
	mb, err := msg.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(c.Addrs()[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = rpcpb.NewInternalClient(conn).Raft(ctx, &rpcpb.RaftMessageBatch{Messages: []*rpcpb.RaftMessage{
		{RangeId: 999, FromNodeId: 7, ToNodeId: n.NodeID(), Message: mb}}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a snapshot overlapping an existing replica: %v, want FailedPrecondition", err)
	}
}
