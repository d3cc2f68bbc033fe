// Package replica runs one Raft group per range on a node: the Raft log and
// state on the node's Pebble engine, the Ready loop, proposals, reads that
// are current with the log, and snapshots.
//
// The Raft algorithm is go.etcd.io/raft/v3's RawNode; this package is its
// caller and follows RawNode's contract in each Ready, in this order:
//
//  1. Persist HardState and new entries (fsync when Ready.MustSync), or the
//     incoming snapshot. Only then may messages be sent: a vote or an
//     append acknowledgement promises that the state is on disk (I2).
//  2. Send Ready.Messages through the Transport.
//  3. Apply Ready.CommittedEntries through the StateMachine, in log order,
//     in one engine batch that also records the applied index, so that the
//     range's data and its applied index move together (I5).
//  4. Serve ReadStates: a read is answered once applied >= its read index.
//  5. Advance.
//
// Only the replica's goroutine touches the RawNode. Other goroutines hand
// it work (messages, proposals, reads, ticks) through a queue.
//
// Commands are evaluated when applied, identically on every replica (state
// machine replication): the StateMachine must be deterministic: no clock,
// no randomness, no state but the engine. The proposer learns its result
// from its own replica's application.
//
// A proposal's outcome is one of: applied (result returned), dropped
// (ErrProposalDropped: definitely never applied, safe to retry), or
// unknown (ErrAmbiguous: the context ended before its entry applied or was
// overwritten). A follower never accepts proposals (no forwarding), so a
// proposal made on a follower is dropped, never ambiguous.
//
// Snapshots are made lazily when the leader needs one: the StateMachine
// serialises the range's data as of the applied index. A replica that
// receives a snapshot replaces the range's data with it.
package replica
