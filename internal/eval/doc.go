// Package eval is the server's command table: one file per request type
// (cmd_*.go), each declaring the key spans the request reads or writes and
// evaluating it into a typed response. The model is CockroachDB's
// batcheval.
//
// Contract for callers (the leaseholder's request path in kvserver):
//
//  1. Declare the batch's spans (Declare) and take latches on them, so that
//     no other request evaluating at the same time touches them.
//  2. Evaluate. A read batch evaluates on a snapshot that is current with
//     the range's Raft log (EvalRead). A write batch evaluates on an indexed
//     engine batch over the leaseholder's applied state (EvalWrite): the
//     batch collects the MVCC writes, all or nothing, and the response is
//     what the client gets once those writes apply. A batch whose
//     evaluation fails writes nothing the caller may keep.
//  3. The caller proposes the batch's bytes (not the requests) through Raft;
//     every replica applies the same bytes, so followers run no evaluation
//     logic and cannot diverge (I5).
//  4. Effects lists the lock changes (intents written, intents resolved)
//     for the leaseholder's lock table, to apply once the writes apply.
//  5. CommitOnePC evaluates with Context.WriteTs as its commit timestamp,
//     taken from the oracle after its latches were acquired (as for Put).
//
// Key records (keyrecord.go): CommitOnePC, QueryOnePC, RecoverIntent,
// PutIntent and ResolveIntent also read or write the plain slot of a user
// key, which holds that key's 1PC records and refusals. Reads, scans,
// refreshes and version GC skip plain slots, so user data never sees it.
//
// Evaluation is deterministic: it reads only its arguments and the reader
// it is given (no clock, no randomness, no node state), so that a command
// evaluated twice on the same state gives the same bytes.
//
// Dispatch is one look-up in a table indexed by rpcpb.Method; a request
// type is added by writing its cmd_*.go file and registering it there.
package eval
