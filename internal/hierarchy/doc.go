// Package hierarchy is the deterministic core of the hierarchical
// deferred-validation commit protocol (seed 004, chapter 3; issue 9): a
// tree of validators whose leaves sit with the data nodes. A transaction
// that touches one node is decided by that node's leaf; a distributed one
// is checked in part at each involved leaf and passed up the tree to the
// lowest validator that covers all its nodes (its decider), which decides
// it and tells the client and the nodes. Votes up the tree and decisions to
// the nodes are batched by size and timeout (3.4).
//
// One type, Validator, serves as a leaf or an inner validator of a Tree,
// in either concurrency-control variant (Locking, Timestamps). It starts no
// goroutine, reads no clock and does no I/O: in the style of etcd raft's
// RawNode and Canopy's tso, the caller feeds it parts, messages and time,
// and collects what it must persist and send from Ready. So one seed of the
// simulation (sim_test.go) replays one history, and datadriven scripts
// (testdata/) step it one input at a time.
//
// # Contract for the caller
//
// A leaf runs with its data node; an inner validator runs on the lowest-ID
// live node below it (internal/kvserver, hierarchy.go). For each
// validator:
//
//  1. Node, when a client's commit request brings a part: Propose. Then
//     carry out Ready (step 4) before the next input touching the same
//     keys. A part the leaf accepted (PartResult.OK, or a committing local
//     Decision) has its writes stored as intents; a refused part stores
//     nothing. A commit request the client sends again (a retry after a
//     lost answer) is answered from the status table if the transaction is
//     decided, and waits if its part is pending (Propose refuses a second
//     part of a pending transaction): proposing it again would decide it
//     again, possibly otherwise. Parts with disjoint keys taken together
//     may instead be checked first, concurrently (Check, read-only), and
//     then admitted in order (ProposeChecked), with no other input in
//     between: the check of a part reads only its own keys' state.
//  2. Node, when it serves a read at snapshot s: Observe(s) before the read
//     looks at the key (under the same latch as intent writes), so that no
//     commit timestamp the leaf issues afterwards is at or below s.
//  3. Step every message addressed to the validator (a MsgDecisions to the
//     leaf's node goes to the leaf); Tick with the time, at least by
//     NextDeadline, and before every input (Propose, Step): the core
//     stamps what an input starts (a pending part, an inner validator's
//     running transaction) with the time of its last Tick, so an input
//     fed after an idle stretch without one would look overdue at once.
//  4. After every input, carry out Ready in this order:
//     a. make Parts and Decisions durable (a part result with its intents;
//     a decision in the status table, by put-unless-exists, in batches).
//     Why first: a vote or decision that is out and then lost in a crash
//     would leave the tree unable to decide the same way again; the
//     durable record is what recovery and lookups read.
//     b. send Messages (any order across links; FIFO per link), and
//     resolve the intents named in Resolve (commit at TS or remove).
//     c. for each of Lookups, read the status table; if the transaction is
//     decided, call Decided.
//  5. After a crash, a leaf restarts with New and a Recovery: ClockFloor at
//     or above every timestamp it issued or observed (a fresh oracle
//     timestamp, maxed with the node's part results and versions),
//     LatestFloor at or above every version on the node, and the durable
//     part results whose transactions the status table does not decide
//     (resolve the decided ones first). An inner validator restarts empty.
//
// # Message loss and recovery
//
// The transport delivers each link's messages in order; it loses only what
// was addressed to (or not yet sent by) a validator that crashed. Nothing
// is lost for good: a leaf votes again for every part whose decision is
// overdue (Config.ResendAfter) and asks its caller to look the transaction
// up in the status table (Ready.Lookups), where every decision is before
// anyone hears of it. A decision is a function of the votes alone (all OK:
// commit at the largest leaf timestamp; else abort), so a validator that
// decides again after a crash decides the same, and the status table's
// put-unless-exists only confirms it (the simulation checks that no
// decision ever changes, invariant I1). Duplicate votes and decisions are
// ignored; an inner validator forgets a transaction no vote came for in
// 2*ResendAfter (its leaves have their decision, or will vote again).
//
// # The leaf's check (3.2.5.A)
//
// A part passes if no key it reads or writes has a committed version above
// its snapshot, no pending part writes a key it touches, and no pending
// part reads a key it writes. Pending means voted up and not yet decided;
// a part that passes holds its keys (reads shared, writes exclusive) until
// its decision comes down. A conflict aborts at once; nobody waits, so
// there are no deadlocks. Like the thesis, a leaf assumes that what it
// passed will commit (a higher abort is conservative: it can only cost
// aborts).
//
// # Timestamps, in the thesis and in Canopy
//
// The order of a serializable history is the order of commit timestamps;
// read-only transactions are placed at their snapshot.
//
//   - Locking (3.3.1): a leaf's timestamp for a part is the smallest above
//     its clock and the snapshot; the decider takes the largest over the
//     parts; every leaf moves its clock to the decision's timestamp.
//   - Timestamps (3.3.2): leaf slot j of n issues only timestamps congruent
//     to j mod n (the first of 8 leaves: 1, 9, 17, ...), the smallest above
//     its clock and the snapshot; timestamps are thus unique across leaves,
//     and so are commit timestamps. A validator releases committing
//     decisions (and, below the decider, successful votes) in timestamp
//     order, once its stable timestamp has passed them: the smallest of its
//     children's watermarks, a watermark being a child's promise that no
//     later vote of it has a timestamp at or below it (a leaf: its next
//     timestamp minus one; an inner validator: its own stable timestamp).
//     A child with nothing to send is asked for a higher watermark
//     (MsgRaise) when a release waits on it; the thesis's pseudocode takes
//     the minimum over the children heard from only, which lets an idle
//     child's later vote come in below a released decision.
//
// Where Canopy differs, and why it stays serializable:
//
//  1. The snapshot is the transaction's start_ts from Canopy's oracle, not
//     the version of its first read (3.2.2). The thesis's rule makes every
//     transaction whose first read is of an older version than a later
//     read abort; an oracle snapshot is current and consistent, so only
//     real conflicts abort. Commit timestamps remain the validators'; they
//     live in the oracle's timestamp space (physical milliseconds and a
//     logical count), where a leaf's +1 (or +n) steps are far below the
//     oracle's pace.
//  2. So a reader's snapshot is chosen by someone other than the writers,
//     and a writer could otherwise commit at or below a snapshot already
//     read, behind the reader's back (the thesis's versions-as-snapshots
//     have the same hole: a leaf's clock knows nothing of reads). A read at
//     s therefore pushes its leaf's clock to s (Observe, the coarsest form
//     of CockroachDB's timestamp cache, one value per node): a part
//     validated after the read gets a timestamp above s, and a part
//     validated before it has its intent in place, which the read waits
//     for. docs/design-notes.md explains why the default protocol needs no
//     such push (its commit timestamps come from the oracle).
//  3. Both variants keep the pending reads and writes of the leaf's check.
//     The thesis's timestamp variant keeps no reads: a local transaction
//     may then write a key that a pending distributed transaction read, and
//     commit at a leaf timestamp below the distributed transaction's final
//     one, which then commits having missed that write (a cycle). Keeping
//     the read until the decision closes it.
//  4. Both variants move a leaf's clock to each commit decision it
//     receives. In the timestamp variant this is already true by the
//     stable timestamp (a decision at t is released only when every leaf
//     below the decider has promised to stay above t; the leaf checks it
//     and panics otherwise); in the locking variant it is 3.3.1's rule.
//  5. The deciding validator does not validate again (the thesis's
//     timestamp variant checks the merged read and write sets against the
//     versions it has seen): with leaves that learn every commit timestamp
//     (4), every conflict of two transactions is seen at a leaf they share,
//     so votes need not carry keys (smaller messages, the thesis's reason
//     for its timestamp variant's lower throughput), and a decision is a
//     function of the votes, which makes recovery simple.
//
// Why that is serializable: let T commit at c_T having read key k at
// version v, and W commit at c_W, writing k, with v < c_W < c_T. If c_W is
// at or below T's snapshot s, W's intent was in place before T's read (a
// later one would have a timestamp above s, by 2), so the read waited for
// W's decision and saw it: v >= c_W, a contradiction. Otherwise c_W > s,
// and both passed the leaf of k: if W passed first, T's check found W
// pending (writer) or committed above s, so T aborted; if T passed first,
// W found T's read pending and aborted, or T's decision had come down and
// moved the clock to c_T, so W's timestamp, and its commit timestamp, is
// above c_T. In every case a contradiction; and conflicting transactions
// never share a commit timestamp (the second to pass their shared leaf
// does so only after the first's decision moved the clock). The simulation
// checks exactly this on every history (sim_test.go), and fails when any
// one of rules 2-4 is taken out.
//
// # Limits
//
// A leaf holds at most Config.PendingMax parts and takes parts of at most
// Config.KeysPerPartMax keys; a part over a limit aborts its transaction
// at the leaf (a commit needs every leaf's vote, so the leaf may), durably,
// and Propose says why (ErrOverloaded is retryable);
// the latest-version table holds at most Config.LatestKeysMax keys (then
// it keeps the newest half and a floor); a batch has at most
// Batching.SizeMax items and waits at most Batching.Timeout; a tree has at
// most TreeValidatorsMax validators. What an inner validator holds is
// bounded by what its leaves hold.
//
// # Counting
//
// Each validator counts the messages it sends and the communication steps
// of what it decides (Counts), so that formulas 3.3 and 3.4 and the worked
// example of 3.5.1 are checked against the core's own counts
// (counts_test.go).
package hierarchy
