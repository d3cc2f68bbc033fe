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
//  2. Reads confirm leadership and catch up with the log (ReadIndex), take
//     read latches on their spans (waiting for writes in flight on the
//     same keys), open an engine snapshot, release the latches, and
//     evaluate on the snapshot (internal/eval).
//  3. Writes wait until the leader is the leaseholder (an entry of its term
//     has applied, so its state is current), take write latches, take a
//     timestamp from the oracle for non-transactional Puts (after
//     latching: a later read waits for the Put and sees it), evaluate on an
//     indexed batch over the engine (internal/eval), and propose the
//     batch's bytes with the Raft term and range generation of the
//     evaluation. Every replica applies those bytes, unless the entry's
//     term or the range's generation differs (then nothing applies and the
//     client retries). Latches are released when the command has applied
//     here or is known never to apply, not when the client stops waiting.
//     A batch that writes nothing (resolving an intent that is gone) is
//     answered without a proposal. A batch of Puts alone takes the state
//     of a key the leaseholder's key cache knows (no intent, its newest
//     version) from there instead of reading it (keystates.go).
//
// Splits, meta updates, the oracle's bound, range-ID allocation and
// version GC are still evaluated when applied, identically on every
// replica; a split first takes a write latch over the whole range.
//
// Bootstrap: `canopy init` sends Bootstrap to one node, which assigns node
// IDs in join-list order and sends every node (itself included) a Join with
// the initial ranges; every replica of a range starts from the same state
// at replica.InitialIndex, and the preferred leader campaigns at once.
//
// Membership (membership.go, change_replicas.go, replicate.go): node
// records in range 1 say which nodes are members (active, decommissioning,
// removed); a node with an empty store joins a running cluster through
// --join. A range's replicas change by Raft configuration changes that
// carry the next descriptor (learners, then a promotion, in a joint
// configuration when a voter is swapped); the replicate queue of each
// leaseholder decides the steps (internal/allocator). Raft peer IDs pack
// a replica ID, never reused, with the node ID (replica/peer.go).
//
// Lease placement (placement.go): the balance rounds hand each range's
// leadership, and with it the lease, to the node the cluster setting names:
// the range's preferred position (spread, the default) or range 1's
// leaseholder, the oracle's host (oracle; a hierarchy cluster keeps
// spread). Read with the members; a node learns the host first-hand from
// range 1's leaseholder's answers; a leadership transfer is all it does.
//
// Meta records (range 1) are kept true by each range's leader: after a
// split, and periodically, a leader whose meta record differs writes it
// with MetaUpdateCommand, which never lowers a record's generation.
//
// Hierarchy protocols (hierarchy*.go; docs/design-notes.md, "The
// hierarchical protocol in kvserver and the client"): when the cluster's
// settings carry a validator tree, every node runs its leaf validator of
// internal/hierarchy in one goroutine (and each inner validator runs on
// the lowest-ID live node below it), serves Hierarchy.Commit (a client's
// part: latches, lease and storage checks, Propose, intents through Raft)
// and the Link streams between nodes, records decisions in the status
// table before anyone is told, and resolves its parts' intents.
//
// Metrics and health (metrics.go, health.go, http.go; docs/OPERATIONS.md):
// the node registers its metrics, and hands the same registry to its
// engine, Raft scheduler and oracle, on Config.Metrics (a registry of its
// own if nil; never a global one). With Config.HTTPAddr it serves them at
// /metrics, with /health (live) and /health?ready=1 (ready); the gRPC
// server carries grpc.health.v1 with the same readiness. Stop stops the
// HTTP server before it closes the store, and unregisters what the node
// registered, so a node restarted in the process may use the same registry.
package kvserver
