// Package client is Canopy's Go client: the public API and the
// transaction coordinator of the default protocol (DESIGN.md, "The default
// transaction protocol").
//
//	db, err := client.Open(ctx, []string{"localhost:26257"})
//	defer db.Close()
//	err = db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
//		v, ok, err := txn.Get(ctx, []byte("a"))
//		...
//		return txn.Put(ctx, []byte("b"), v)
//	})
//
// # What a caller can rely on
//
//  1. Keys are any bytes up to keys.KeyBytesMax; values up to
//     keys.ValueBytesMax; a transaction writes at most keys.TxnKeysMax keys.
//     Larger input fails before anything is sent, with ErrInvalidArgument
//     naming the limit and the actual size.
//  2. Errors are typed (errors.Is): ErrInvalidArgument (never retried),
//     ErrRetryable (*RetryableError with a Reason; the transaction aborted
//     and can be rerun), ErrAmbiguous (a write's outcome is unknown),
//     ErrUnavailable (nothing was written / the transaction did not commit),
//     ErrInternal (a server bug), ErrPermission (a node refused the
//     caller's certificate or user before doing anything; never retried).
//     A context that ends is visible with errors.Is(err,
//     context.DeadlineExceeded) as well. With Options.TLS (LoadTLS) every
//     connection is mutual TLS; without it, plaintext, which only nodes
//     started with --insecure accept.
//  3. Isolation: transactions are serializable by default; with
//     WithIsolation(SnapshotIsolation) they read a snapshot and conflict
//     only on writes (write skew possible). Reads see the snapshot at
//     StartTs plus the transaction's own writes.
//  4. DB.Txn returns nil exactly when the transaction committed. It reruns
//     the closure only after an ErrRetryable, i.e. when the previous
//     attempt is known to have aborted: after a commit whose outcome was
//     unknown it first looks the transaction up in the status table
//     (writing "aborted" if no decision is recorded yet, which settles it)
//     and returns ErrAmbiguous only if that lookup cannot complete. Retries
//     back off exponentially with jitter and stop at TxnAttemptsMax or when
//     ctx ends.
//  5. Commit returns once the decision is durable (the status-table write
//     is replicated); intents are resolved in the background afterwards.
//     Readers never depend on that cleanup: they resolve intents by the
//     status table.
//  6. DB.Get, Put, Delete and Scan outside a transaction are linearizable
//     single-range operations (Scan: a snapshot at a fresh timestamp).
//     Put and Delete are retried only while no attempt can have applied;
//     after an attempt that may have (a lost connection, a deadline, a
//     leader change under the proposal) they return ErrAmbiguous rather
//     than write a second time.
//  7. Routing is the client's job: range descriptors are cached and fixed
//     up after splits and lease moves, and requests are retried on other
//     nodes, all within ctx and Options.SendAttemptsMax.
//  8. Pipelining (Options.Pipelining, WithPipelining; on by default): a
//     transactional Put or Delete returns once the leaseholder has
//     evaluated and proposed it, before it is replicated. The transaction
//     proves such a write before a later read or write of its key and
//     before Commit's commit point; one that failed to replicate makes that
//     operation or Commit return *RetryableError with
//     ReasonPipelinedWriteFailed. A transaction never commits without every
//     write it was told succeeded. Pipelined bytes not yet proven are
//     bounded by Options.PipelinedBytesMax, beyond which writes wait for
//     replication again.
//  9. Parallel commits (Options.ParallelCommits, WithParallelCommits; on
//     by default, with pipelining): Commit writes a STAGING record in
//     parallel with the proofs and returns once both are done; the
//     COMMITTED status is recorded afterwards. A reader that finds the
//     coordinator gone recovers the transaction (recovery.go).
//  10. One-phase commit (Options.OnePC, WithOnePC; on by default):
//     Txn.CommitWith hands writes to the commit; if the transaction has
//     written nothing else and they (and, serializable, its reads) fall
//     in one range, they commit in one request and one Raft proposal.
//  11. The three switches are also a cluster setting, changeable at run
//     time (DB.SetTxnSwitches, canopy admin setting); TxnOptions override
//     Options, which override the setting.
//
// A transaction's liveness is its heartbeat record, refreshed every
// HeartbeatTTL/5. If a client stalls or dies, others abort its pending
// transactions once the record expires; its own commit then fails with a
// retryable error. Safety never depends on clocks: exactly one
// put-unless-exists decides each transaction (invariant I1).
//
// # Internals, one file per concern
//
//	range_cache.go      range descriptors ordered by start key, leaseholder hints
//	nodes.go            node IDs, addresses, connections
//	sender.go           routing, redirects, retries, ambiguity, per-range batches
//	probe.go            health probes of a node that leaves an attempt unanswered;
//	                    suspect nodes; asking another replica to proxy
//	oracle.go           batched timestamp requests
//	kv.go               single-key operations
//	txn.go              Txn (the top of the coordinator), Begin, DB.Txn retry loop
//	txn_layers.go       the coordinator's stack of layers: their order and interface
//	heartbeat.go        layer: the heartbeat record
//	txn_seq.go          layer: sequence numbers of writes
//	txn_pipeliner.go    layer: pipelined writes in flight, their proofs
//	txn_commit.go       Commit; layer: the commit point, ambiguous-commit lookup,
//	                    parallel commits (STAGING beside the proofs)
//	txn_onepc.go        CommitWith and the one-phase commit
//	recovery.go         recovery of STAGING transactions; the reader's fence
//	settings.go         the cluster's transaction switches
//	txn_refresh.go      layer: the read set and the serializable refresh
//	txn_wire.go         layer (bottom): requests to RPCs, others' intents met
//	intent_resolver.go  resolving others' intents; async cleanup of ours
//	status.go           status-table reads and put-unless-exists
package client
