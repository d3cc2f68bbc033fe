// Package storage wraps one Pebble instance per node.
//
// A node keeps everything it persists in one engine, under disjoint key
// prefixes (see keys.go):
//
//	PrefixRangeLocal  range-local state: Raft log, HardState, applied index, descriptor
//	PrefixData        MVCC data of every range on the node (logical keys, see mvcc)
//	PrefixNodeLocal   node identity (cluster ID, node ID), the blob manifest
//
// Contract for callers:
//
//  1. Reads go through a Reader (Engine, Batch or Snapshot); writes are
//     collected in a Batch and made durable by Batch.Commit(true). A write
//     that is acknowledged to anyone outside the node must have been
//     committed with sync=true (invariant I2).
//  2. Values returned by Get and by iterators are copies owned by the
//     caller unless the method says otherwise.
//  3. Keys passed in are not retained.
//  4. Close every Iter and Snapshot: an open one holds back blob GC, which
//     never punches or deletes bytes that an older reader may still follow
//     a pointer into.
//
// # Value separation (issue 3; seed 002)
//
// Value separation is a property of the engine (Options.Mode); callers read
// and write plain values and never see a blob pointer. Values under
// PrefixData of at least Options.ThresholdBytes go, in ModeRewrite and
// ModePunch, to blob files (package vlog); the LSM stores a tagged pointer
// (value.go). Values under other prefixes are never separated.
//
// Write path (separate.go): Batch.Set stores values inline in the Pebble
// batch, so indexed batches read their own writes; Commit appends large
// values to the current blob file, syncs it, and commits a rebuilt batch
// with pointers. Under per-key stripe locks it first reads the value each
// written key held (and scans deleted ranges), so that the record a write
// kills is known exactly; the killed bytes are added to the file's discard
// counter (a Pebble merge operand) in the same atomic batch. Doing this in
// the engine rather than in package mvcc makes the accounting exact for
// every caller (overwrites, intent resolution, version GC, range deletes)
// at the cost of one point read per written data key.
//
// GC (gc.go): ModeRewrite picks files by discardable ratio and copies their
// live records to new files (Titan's classic GC); ModePunch first punches
// holes over dead block-aligned spans of the files with the most new
// discardable bytes (no LSM write), then merges files whose allocated size
// fell below a threshold, smallest first. Pointer updates are
// check-and-set under the stripe locks, so a concurrent newer write always
// wins. ModePebble hands separation to Pebble's own ValueSeparationPolicy.
//
// Crash safety (blobs.go): blob records are synced before the pointers that
// name them; the blob manifest (file states and discard counters) lives in
// the engine under node-local keys, changed atomically with the batches it
// describes; at Open, files that were active at a crash are rescanned
// (torn tail excluded, discard recomputed from the LSM) and sealed, orphan
// and obsolete files are removed. Engine.CheckBlobs verifies it all.
package storage
