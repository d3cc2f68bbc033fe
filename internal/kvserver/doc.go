// Package kvserver is a Canopy node: one storage engine, the replicas of
// the ranges the node holds, the gRPC services (KV for clients, Internal
// between nodes), the Raft transport, and the timestamp oracle when the
// node leads range 1.
//
// Request handling (KV.Batch):
//
//  1. The node must hold a replica of the addressed range (else
//     RANGE_NOT_FOUND), that replica must be the Raft leader, which is the
//     leaseholder (else NOT_LEASEHOLDER with a hint), and every key must lie
//     in the range (else RANGE_KEY_MISMATCH with the current descriptor).
//  2. Reads wait for in-flight non-transactional writes they overlap
//     (latches), confirm leadership and catch up with the log (ReadIndex),
//     then evaluate on an engine snapshot.
//  3. Writes are proposed as one RaftCommand and evaluated when applied, on
//     every replica, all-or-nothing. Non-transactional Puts first latch
//     their keys and take their timestamp from the oracle, so that any read
//     with a higher timestamp waits for them: this makes them
//     linearizable and keeps snapshot reads consistent.
//
// Bootstrap: `canopy init` sends Bootstrap to one node, which assigns node
// IDs in join-list order and sends every node (itself included) a Join with
// the initial ranges; every replica of a range starts from the same state
// at replica.InitialIndex, and the preferred leader campaigns at once.
//
// Meta records (range 1) are kept true by each range's leader: after a
// split, and periodically, a leader whose meta record differs writes it
// with MetaUpdateCommand, which never lowers a record's generation.
package kvserver
