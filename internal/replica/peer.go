package replica

import "fmt"

// Raft peer IDs. A range's Raft group names its members by peer ID. A peer
// ID packs the replica ID (unique within the range, never reused) above
// the node ID:
//
//	peer ID = replica ID << 32 | node ID
//
// so that the node a message goes to, or a leader is on, is known from the
// ID alone: an uninitialized replica (created for an incoming message,
// with no descriptor yet) and the transport route by it. The replicas of
// a range's initial layout have replica ID 0, so their peer ID is their
// node ID (stores written before replica IDs existed read the same).
//
// Why a replica removed from a node and added there again must not reuse
// its peer ID: a leader that added it back would count acknowledgements
// the old incarnation sent before its state was removed (I2), and the new
// incarnation, starting from an empty Raft state, could vote a second time
// in a term in which the old one voted.

// NodeIDMax is the largest node ID a peer ID can carry.
const NodeIDMax = 1<<32 - 1

// PeerID returns the Raft peer ID of the replica replicaID on node nodeID.
// It panics if nodeID exceeds NodeIDMax (node IDs are allocated one by
// one from 1; reaching it is a bug).
func PeerID(replicaID, nodeID uint64) uint64 {
	if nodeID > NodeIDMax || replicaID > NodeIDMax {
		panic(fmt.Sprintf("replica: node ID %d or replica ID %d exceeds %d", nodeID, replicaID, uint64(NodeIDMax)))
	}
	return replicaID<<32 | nodeID
}

// NodeOf returns the node ID packed in a peer ID.
func NodeOf(peerID uint64) uint64 { return peerID & NodeIDMax }

// ReplicaIDOf returns the replica ID packed in a peer ID.
func ReplicaIDOf(peerID uint64) uint64 { return peerID >> 32 }
