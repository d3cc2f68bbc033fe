// Package mvcc stores versioned keys, intents and plain keys in the
// storage engine, and implements reads at a timestamp and the conflict
// rules of Canopy's default transaction protocol (DESIGN.md, "The default
// transaction protocol"; the request semantics are those of the MVCC
// requests in internal/rpc/rpcpb/canopy.proto).
//
// # Contract for callers
//
//  1. Functions that write (PutIntent, ResolveIntent, PutCommitted, the
//     plain writes, GC, ClearSpan) run when a Raft entry is applied, on an
//     indexed storage.Batch, and must see the writes of the entries before
//     them in the same batch. They are deterministic: they read no clock,
//     draw no random numbers and depend only on their arguments and the
//     state they read, so every replica that applies the same entries
//     holds the same data (invariant I5).
//  2. Reads (Get, Scan, Refresh, GetPlain, ScanPlain) take any
//     storage.Reader; the caller makes sure the reader is current with
//     the Raft log (leaseholder, ReadIndex).
//  3. The caller latches the keys a request touches, so that no two
//     evaluations of the same key interleave. This package does no locking.
//  4. Errors: *WriteConflictError, *IntentError and *ReadConflictError are
//     the protocol's outcomes (use errors.As); ErrInvalidArgument marks
//     bad arguments; errors wrapping storage.ErrCorruption mark stored
//     bytes that fail to decode; ErrInvariant marks stored data the
//     conflict rules forbid. A function that returns a protocol error or
//     ErrInvalidArgument has written nothing, so the batch may go on. After
//     other errors (storage, corruption) the caller should drop the batch;
//     GC and GCLimited are the exception: every deletion they made before
//     an error is valid on its own.
//  5. Timestamps come from the timestamp oracle and are unique; 0 means
//     "none" and is never the timestamp of a stored version or intent.
//  6. Returned keys and values are copies owned by the caller, except the
//     slices passed to the IterateSpan callback and those returned by
//     DecodeIntentValue and DecodeVersionValue, which alias their input.
//
// # Conflict rules
//
//   - Get/Scan at ts by txnStart: an own intent is read as the value; a
//     foreign intent with start_ts <= ts (any, when ts == 0) is an
//     IntentError; a foreign intent with start_ts > ts is invisible (it
//     commits above ts); otherwise the newest version <= ts is read.
//   - PutIntent by txn: a committed version newer than txn's start_ts, or a
//     foreign intent, is a WriteConflictError; an own intent is replaced.
//   - PutCommitted at ts: any intent is an IntentError; a version at or
//     above ts is a WriteConflictError.
//   - ResolveIntent: commits the intent as a version at commit_ts, or
//     removes it (commit_ts 0); a missing or foreign intent is a no-op.
//   - Refresh over (from_ts, to_ts]: a version in the interval, or any
//     foreign intent, is a ReadConflictError.
//
// Invariants: a logical key has at most one intent. While it has one, no
// committed version is added at it except by resolving that intent, and
// every committed version at it is at or below the intent's start_ts.
//
// # Physical encoding
//
// Every logical key k is stored under storage.PrefixData:
//
//	physical(k, slot) = PrefixData + esc(k) + 0x00 0x01 + slot
//
// where esc(k) replaces each 0x00 byte of k by 0x00 0xFF, and slot is
//
//	(empty)               plain (unversioned) key
//	0x00                  the intent
//	0x01 + BE64(^ts)      the committed version at ts
//
// Because 0x00 0x01 appears only as the terminator, the physical order is:
// logical keys in bytewise order; within one key, plain, then intent,
// then versions newest first. So [physical(start, plain),
// physical(end, plain)) holds exactly the keys of the logical span
// [start, end) (SpanBounds), and the versions of k lie in
// [physical(k, 0x01), physical(k, 0x02)).
//
// Values:
//
//	plain key  the value as given
//	version    tag byte (0x01 value, 0x02 tombstone) + value
//	intent     format version 1, flags (bit 0: tombstone), uvarint start_ts,
//	           uvarint heartbeat key length + heartbeat key, value
//
// Decoders reject any byte string the encoders cannot produce, with an
// error wrapping storage.ErrCorruption.
//
// # Alternatives rejected
//
// Keeping the intent's metadata and value under separate physical keys
// (as CockroachDB once did) would let a reader check the writer without
// loading a large value, but costs two writes per intent and a window in
// which they disagree; the value log already keeps large values out of
// the LSM, so one record is enough. Encoding the timestamp in the key
// with a fixed-width, inverted big-endian suffix, rather than a varint,
// keeps versions newest first under bytewise order, which Pebble needs.
package mvcc
