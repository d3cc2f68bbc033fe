// Package commitprotocol names Canopy's commit protocols and states the
// contract every one of them keeps, on the client and on the server. The
// implementations live with the code they drive: the client side in
// package client (protocol.go: a commitProtocol builds a transaction's
// coordinator stack), the server side in package kvserver (protocol.go: a
// serverProtocol decides which requests a node serves and runs the
// protocol's background machinery).
//
// # The protocols
//
//   - Default: the protocol of DESIGN.md (reads at start_ts, intents,
//     refresh, put-unless-exists), with pipelining, parallel commits and
//     1PC behind their switches.
//   - TwoPCLocking: client-coordinated two-phase commit with strict
//     two-phase locking at the leaseholders: reads take shared locks,
//     writes are buffered at the client and written as intents under
//     exclusive locks by Prepare (the vote), the client's put-unless-exists
//     in the status table is the decision, ResolveIntent of every key read
//     or written is the second phase and releases the locks
//     (docs/design-notes.md, "The 2PC + locking baseline").
//   - HierarchyLocking, HierarchyTimestamps: the thesis's hierarchical
//     deferred validation (seed 004, internal/hierarchy), lock-based and
//     timestamp-based (internal/kvserver hierarchy*.go, client
//     txn_hierarchy.go; docs/design-notes.md, "The hierarchical protocol
//     in kvserver and the client").
//
// # Contract (every protocol, both sides)
//
//  1. One protocol per cluster, chosen at init (ClusterSettings.
//     commit_protocol, `canopy init --commit-protocol NAME`) and never
//     changed: every node learns it with the other cluster settings when it
//     joins, and `canopy status` shows it. A client reads it at Open.
//  2. Every transactional request names its transaction's protocol
//     (BatchRequest.protocol; empty means Default). A node serves it only
//     if its cluster's protocol admits it; otherwise the request is
//     refused, before anything is evaluated, with PROTOCOL_NOT_RUN, which
//     the client returns as *client.ProtocolError (wrapping
//     ErrInvalidArgument: never retried). Requests outside transactions
//     (non-transactional reads and writes, status and heartbeat records,
//     intent resolution) belong to no protocol and are always served.
//  3. A transaction may name another protocol than its cluster's
//     (client.WithProtocol) only where that is safe, which the cluster's
//     protocol decides (serverProtocol.admit). Both built protocols admit
//     a Default read-only transaction's snapshot reads (Get and Scan at
//     start_ts, no lock): every write of either protocol takes its
//     commit_ts from the oracle after its intent is in place, so the
//     argument of docs/design-notes.md ("Reads, and why a read at a
//     timestamp blocks no later write below it") holds for the reader.
//     Writes of another protocol than the cluster's are never admitted.
//  4. The commit point is the same for every protocol: put-unless-exists
//     of start_ts -> commit_ts (or ABORTED) in the status table (I1), in
//     the cluster's status encoding, made before the client is told and
//     before any intent is resolved. So a reader that meets any protocol's
//     intent resolves it by the status table, as today, and a coordinator
//     or validator that crashes leaves a state any reader can finish:
//     commit if the record says so, abort (put-unless-exists of ABORTED)
//     once the transaction's heartbeat has expired.
//  5. Intents are the tentative versions of every protocol (PutIntent's or
//     Prepare's), resolved with ResolveIntent, which also releases the
//     locks (shared or exclusive) the transaction holds at the key.
//  6. Each protocol counts its messages per transaction (client.Stats
//     ProtocolTxns, ProtocolMessages, ProtocolSteps), so that `canopy bench hierarchy`
//     reports them beside formulas 3.3 and 3.4 of the thesis.
package commitprotocol
