// Package pipelinebench reproduces the two experiments of CockroachDB's
// transactional pipelining post (seed 001, issue 8 item 6) on Canopy, for
// `canopy bench pipeline`:
//
//  1. Inter-node round trip vs the latency of a New-Order-like transaction
//     (NewOrder: 4 reads, then 5 writes, each its own statement, over keys
//     spread across ranges), for round trips from 0 to 90 ms. Each mode's
//     line is fitted by least squares (FitLine) and its slope, in ms of
//     transaction latency per ms of round trip, is printed beside the
//     post's (6 without pipelining, 2 with it) and the model's 1 for
//     parallel commits.
//  2. Number of writes (1, 2, 4, ..., 256) vs latency at a fixed round
//     trip; the slope of latency against writes is the cost of one more
//     write, beside the post's "a little under half a millisecond".
//
// Each point runs in three modes (Modes): pipelining off, pipelining on,
// and pipelining with parallel commits, chosen per transaction with
// client.TxnOptions (one-phase commit off in all three, as in the post,
// which sets it aside).
//
// What the system counted rides along with every point: consensus rounds
// on the transaction's critical path (client.RoundCounter: sequential waits
// for a Raft round, parallel ones counting once), the Batch RPCs sent on
// that path (CallCounter, through the client's gRPC interceptor), the
// oracle's Timestamps RPCs (client.Stats), and from a caller-supplied probe
// of the nodes (Runner.Raft): the Raft entries every range appended (work
// done after the client was answered, such as intent resolution, included)
// and the ReadIndex rounds that requests waited for, on the oracle's range
// apart (a read, or a timestamp, whose leaseholder's lease had lapsed), and
// the process's CPU time. Nothing here computes a count from the model.
//
// Contract for callers: run points one at a time on a client used by
// nothing else (the Stats and Raft deltas of a point are divided by its
// transactions), set the network delay before a point and leave it
// unchanged during it, and bound every point by Limits (a duration and a
// count of transactions). A point reports failed transactions instead of
// hiding them; a latency is recorded only for committed ones.
package pipelinebench
