// Package allocator decides where a range's replicas go: the replicate
// queue's deterministic core. Given one range (its replicas, which of its
// learners are ready, which voters have caught up, where the lease is)
// and the cluster's nodes (membership, liveness, replica counts), Decide
// returns the one next step: leave a joint configuration, add a learner,
// promote a learner (alone, or swapped for a voter to remove), remove a
// replica, move the lease, or nothing. It does no I/O and reads no clock;
// the node (kvserver/replicate.go) gathers the input and carries out the
// step, one Raft configuration change at a time.
//
// Contract, in the order Decide applies it (each rule only when every
// rule above asked for nothing):
//
//  1. A joint configuration is left first.
//  2. A learner on a node that is not a healthy target (not live, not
//     ACTIVE) is removed. A ready learner (it takes appends) is promoted:
//     alone while voters are missing, else swapped for the voter to
//     replace: a voter on a bad node (dead past the timeout,
//     DECOMMISSIONING or REMOVED) first, else the voter on the node with
//     the most replicas; never the leaseholder's (the lease moves first).
//     A learner that is not ready yet is waited for, unless the caller
//     says it is stuck (not ready for too long): then it is removed.
//  3. A leaseholder on a DECOMMISSIONING or REMOVED node hands the lease
//     to a caught-up voter on a healthy node.
//  4. A range with a voter on a bad node, or with fewer voters than the
//     replication factor, gets a learner on the healthy node (live,
//     ACTIVE, no replica of the range) with the fewest replicas. With no
//     such node, a range with more voters than the factor removes the bad
//     one; otherwise it waits: a voter is never removed for want of a
//     replacement (CockroachDB's decommissioning waits the same way).
//     A damaged replica (its data failed a check when read) counts as a
//     voter on a bad node, and is never a lease target; with no node to
//     replace it on, it is removed while three or more voters remain, so
//     that its own node can take a new replica, filled by a snapshot.
//  5. A range with more voters than the replication factor removes one
//     (not the leaseholder's: the lease moves first).
//  6. Rebalancing, only when every voter's node is live: if a voter's node
//     holds at least RebalanceThreshold more replicas than the healthy
//     node with the fewest that holds none of this range, a learner is
//     added there (rule 2 then swaps it for the fullest voter).
//
// Safety does not rest on these rules: every step is a Raft
// configuration change checked by Raft, and a step that cannot keep a
// quorum live is not Decide's to forbid. The rules aim at availability:
// a dead voter is replaced before any rebalancing, a live voter is never
// removed while another voter's node is down, and the count of voters
// only passes through replication factor + 1 (as a learner, which does
// not vote) or a joint configuration.
package allocator
