// Package replica runs one Raft group per range on a node: the Raft log and
// state on the node's Pebble engine, the Ready loop, proposals, reads that
// are current with the log, and snapshots.
//
// The Raft algorithm is go.etcd.io/raft/v3's RawNode; this package is its
// caller. A replica has no goroutine of its own: callers put work
// (messages, proposals, reads, ticks) in its inbox and queue it with the
// node's Scheduler, whose bounded pool of workers handles the Ready work of
// all ranges. A worker takes several queued ranges and handles them in one
// round (Scheduler.round), in this order:
//
//  1. For each range: drain the inbox into the RawNode and take its Ready.
//     Send the messages that promise nothing about this node's disk: a
//     leader's appends and heartbeats, a candidate's vote requests. Write
//     HardState, new entries and an incoming snapshot into a batch that
//     the round's ranges share. A HardState whose commit index alone
//     changed is not written (etcd raft never asks to sync it): the
//     stored commit index may lag, and loading raises it to the applied
//     index, which only committed entries reach.
//  2. Commit that batch once, synced if any range's Ready.MustSync (or a
//     snapshot) asks for it: one sync for many ranges (group commit).
//  3. For each range: send the messages that promise durable state
//     (append acknowledgements, votes: MsgAppResp, MsgVoteResp,
//     MsgPreVoteResp).
//  4. Apply Ready.CommittedEntries through the StateMachine, in log order,
//     in one engine batch that also records the applied index, so that the
//     range's data and its applied index move together (I5).
//  5. Serve ReadStates: a read is answered once applied >= its read index.
//  6. Advance; a range with more work is queued again.
//
// Why this order is safe. I2 needs that no entry counts towards a commit,
// and no vote is cast, before the state behind it is durable. etcd raft
// (v3.6, classic mode: AsyncStorageWrites off) keeps exactly the messages
// that carry such a promise apart (raft.go, send: msgsAfterAppend) and
// counts the leader's own append, and a candidate's own vote, only when
// they are stepped at Advance, after step 2. The other messages depend on
// nothing durable here: a follower that receives an append before the
// leader has synced it persists it itself before acknowledging, so an entry
// is committed only once a quorum holds it on disk, whether or not the
// leader is in that quorum (the Raft thesis, 10.2.1: the leader writes to
// its disk in parallel with the followers). A message sent early about
// state that a crash then loses (a term, a vote request) is one a restarted
// node could have sent anyway. Every message of a Ready goes after the
// entries of all earlier Readies are durable, as the RawNode contract asks,
// because a range's Readies are handled one at a time. Apply comes after
// step 2, so entries that arrive committed in the Ready that appends them
// are durable before they apply.
//
// A leader hands the commands queued for a round to Raft as one MsgProp
// (proposeBatch; runs of at most proposeBatchBytes), not one Propose each:
// etcd raft sends each follower an append per MsgProp, so a round's
// commands reach a follower in one append and draw one answer.
//
// Superseded appends are not sent (supersededApps): when one Ready holds a
// commit-only MsgApp to a follower and, after it, another MsgApp to the same
// follower (same term, same or later log position and commit index), only
// the later goes. Under load nearly every Ready of a busy leader had that
// pair (an acknowledgement advanced the commit index, which raft broadcasts
// at once, and new proposals were appended); not sending the first halved
// the Raft messages per put, since the follower answers every append it
// gets. Dropping a message is always safe in Raft; this one's content
// arrives with the next, on the same ordered stream.
//
// Rejected: etcd raft's AsyncStorageWrites. It would let a range take its
// next Ready before the last one is durable, and apply on its own thread;
// but it moves the contract into local messages (MsgStorageAppend and
// MsgStorageApply with their responses) that we would have to route and
// order ourselves, for a gain that group commit across ranges already
// takes: while one round syncs, other workers handle other ranges.
//
// Only one goroutine touches a RawNode at a time: the scheduler hands a
// range to one worker at a time and keeps it from others until step 6, and
// the worker holds the replica's raftMu in steps 1 and 2 and again in 3 to
// 6. It lets go in between because step 4 may stop another replica (a
// split replaces the uninitialized replica of its right hand side), which
// may be one of the same round; Stop takes that raftMu, marks the replica
// stopped and fails its waiters, and a stopped replica is not touched
// again.
//
// Every replica applies the same entries through the StateMachine, which
// must be deterministic: no clock, no randomness, no state but the engine
// (state machine replication). What an entry holds is the caller's
// business: kvserver evaluates requests at the leaseholder before it
// proposes them, so most entries carry the writes to apply (checked at
// apply against the term and the range generation they were evaluated
// under), while splits, meta records, the oracle's bound, GC and range 1's
// other administrative commands (range IDs, membership) are still
// evaluated when applied. The proposer learns the result from its own
// replica's application.
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
//
// # Quiescence
//
// An idle range costs nothing: its replicas quiesce, take no ticks and
// send no heartbeats, and the node's tick loop does not even queue them
// with the scheduler (Tick is a no-op on a quiescent replica). It works
// as CockroachDB's does, adapted:
//
//  1. The leader quiesces on a tick when the group is idle: the tick
//     drains no proposal, read or lease read (and Config.QuiesceIdleTicks
//     ticks before it saw none, nor a commit; by default no such tick is
//     asked for); nothing pending
//     (proposals, reads, lease renewals, a transfer, a Ready); every
//     live follower (Config.PeerLive) recently active and holding the
//     whole log (Match == last index), which is committed and applied at
//     the leader, and the leader with its live followers a quorum (a
//     follower on a node that is not live is left out, and woken with
//     its leader when its node is live again). It sends each follower a quiesce heartbeat
//     (QuiesceTransport.SendQuiesce: a MsgHeartbeat with the commit index,
//     marked in the transport's wrapper) and stops ticking. If its lease
//     served a read since its last ReadIndex round was issued, or it has
//     no lease in its term yet, it renews or takes the lease on that tick
//     instead and quiesces on a later one, once the round is answered: a
//     range keeps its lease for a LeaseDuration after its last read, and
//     a new leader quiesces holding one.
//  2. A follower steps the quiesce heartbeat like any heartbeat (which
//     resets its election clock and sets its commit index); if it then
//     follows that leader in that term at that commit index, with nothing
//     else in its inbox, it quiesces and does not answer. Otherwise it
//     answers, which wakes the leader, and stays awake.
//  3. Anything else wakes a replica: a proposal, a read, any message, a
//     campaign, a transfer, an unreachable report, or Unquiesce (node
//     liveness, in kvserver: a quiesced follower whose leader's node went
//     silent, or a quiesced leader with a follower on such a node). A woken
//     follower whose leader is still quiesced eventually pre-votes; the
//     pre-vote is refused (its peers are in the leader's lease) but wakes
//     them, and the leader's heartbeats bring the follower back.
//
// Leases stay safe. A leader's lease (leaderLease) rests on followers
// refusing votes, and not campaigning, for ElectionTicks of their ticks
// after they acknowledged the leader. A quiescent follower takes no ticks,
// so quiescence only lengthens that refusal; when it wakes it counts from
// where its clock stopped, just after the quiesce heartbeat reset it. The
// quiescent leader renews nothing: its lease runs out at most
// LeaseDuration after its last renewal, and the first read after that
// goes through ReadIndex, which wakes the group. A quiescent leader does
// not run CheckQuorum either; kvserver's liveness wakes it when a
// follower's node goes silent, so that a leader cut off from its
// followers steps down while they elect another.
package replica
