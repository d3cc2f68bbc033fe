package rpcpb

import (
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Cluster identity on the wire (see kvserver/identity.go): gRPC metadata
// that every node-to-node RPC carries, and every client RPC once the
// client knows the cluster's ID.
const (
	// MetadataClusterID is the metadata key of the sender's cluster ID.
	MetadataClusterID = "canopy-cluster-id"
	// MetadataFromNode is the metadata key of the sending node's ID.
	MetadataFromNode = "canopy-from-node"
	// ClusterMismatchPrefix starts the message of an RPC a node refused
	// because it names another cluster (codes.FailedPrecondition).
	ClusterMismatchPrefix = "cluster mismatch"
	// NodeRemovedPrefix starts the message of an RPC a node refused
	// because its sender was removed from the cluster
	// (codes.FailedPrecondition).
	NodeRemovedPrefix = "node removed"
)

// IsNodeRemoved reports whether err is a node's refusal of an RPC from a
// node removed from the cluster. Such an RPC was not executed.
func IsNodeRemoved(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.FailedPrecondition && strings.HasPrefix(s.Message(), NodeRemovedPrefix)
}

// IsClusterMismatch reports whether err is a node's refusal of an RPC that
// names another cluster. Such an RPC was not executed.
func IsClusterMismatch(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.FailedPrecondition && strings.HasPrefix(s.Message(), ClusterMismatchPrefix)
}
