// Package storage wraps one Pebble instance per node.
//
// A node keeps everything it persists in one engine, under disjoint key
// prefixes (see keys.go):
//
//	PrefixRangeLocal  range-local state: Raft log, HardState, applied index, descriptor
//	PrefixData        MVCC data of every range on the node (logical keys, see mvcc)
//	PrefixNodeLocal   node identity (cluster ID, node ID)
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
//
// Value separation (large values in blob files, see internal/vlog) is a
// property of the engine; callers read and write plain values and never see
// a blob pointer.
package storage
