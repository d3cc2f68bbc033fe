// Package txnstatus holds the transaction status table's encodings and its
// selective-batching loader: the pure, deterministic parts of the table,
// following AtlasDB ADR 16 (seed 003, "tickets encoding").
//
// The status table maps start_ts -> commit_ts or aborted. A transaction
// commits exactly when put-unless-exists(Key(start_ts), EncodeValue(start_ts,
// commit_ts)) succeeds (invariant I1); the table lives under
// keys.StatusPrefix and that write is made by the server, not here.
//
// # Encodings
//
//   - NewV1: the record's original layout. key = VarLong(start_ts), value =
//     VarLong(commit_ts), aborted = VarLong(-1) (ten bytes). Keys sort in
//     timestamp order, so all writes of the moment go to one range (the
//     hotspot the record describes). Kept as the baseline.
//   - NewTickets: the record's tickets layout. key = 8-byte big-endian
//     bits.Reverse64(row) + VarLong(column), value = VarLong(commit_ts -
//     start_ts) or empty for aborted. Consecutive start timestamps get
//     different top key bits and so land on different ranges when the table
//     is pre-split with keys.StatusSplitKeys (a power of two up to NP).
//   - NewTicketsMix: tickets with the row offset XORed with the low bits of
//     the start timestamp's millisecond, because Canopy's timestamps are
//     not a dense counter: their low bits are mostly small, and plain
//     tickets then loads some status ranges far more than others. The
//     default encoding of new clusters (kvserver.DefaultStatusEncoding).
//
// # STAGING (parallel commits)
//
// staging.go extends both encodings for parallel commits without touching
// the final status: beside Key(start_ts), StagingKey(start_ts) = Key +
// StagingSuffix holds, written once by put-unless-exists, either a STAGING
// record (commit_ts and the in-flight writes: key, value hash) or a FENCE.
// The final status is still written only by put-unless-exists at Key, with
// the same values as before, so v1 and tickets stores written before the
// extension read the same, and I1 keeps its form: a transaction commits
// exactly when COMMITTED wins its status key, or when it is implicitly
// committed (its STAGING record won and every staged write is in place),
// after which no one writes ABORTED (see docs/design-notes.md for why).
//
// VarLong is the record's VAR_LONG, an order-preserving, minimal
// prefix-length encoding of uint64 (see varlong.go for the layout).
//
// # Contract for callers
//
//  1. Every reader and writer of a start_ts's record must use the same
//     Encoding: the two give different keys for the same start_ts, and a
//     reader using the wrong one would see "no record" (pending) for a
//     decided transaction. A cluster picks one at bootstrap; a Schedule
//     (schedule.go) moves it to another for start timestamps above a
//     cutover (the record's "live migrations"), and says which encoding
//     each start_ts uses. Scan a table of several eras with ScanSchedule.
//  2. Prefix keys with keys.StatusKey before storing them; StartTs takes the
//     key without the prefix.
//  3. Pass commit_ts = Aborted (0) to record an abort, or a commit_ts above
//     start_ts; anything else is ErrInvalidArgument. Oracle timestamps are
//     never 0.
//  4. DecodeValue and StartTs check what they read; a failure wraps
//     ErrCorruption and must not be taken as "pending" or "aborted".
//  5. Range scans (debug txns, backup): ScanSpans plans the key spans of a
//     start_ts interval (v1: one span; tickets: one span per row of each
//     partition met, or the whole table when that would exceed RowSpansMax)
//     and ScanInterval reads them through the caller's reader, filters and
//     joins each transaction's status and staging records (scan.go).
//  6. Batched lookups: split tickets keys into cells with SplitTicketsKey
//     and group them into requests with PartitionForLoad.
//  7. A scan of the table meets staging keys too: StartTs fails on them
//     (ErrCorruption); StagingStartTs reads them. Decode their values with
//     DecodeStaging, never with DecodeValue.
package txnstatus
