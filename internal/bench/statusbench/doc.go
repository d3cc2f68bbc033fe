// Package statusbench runs the transaction status table's experiments
// (issue 10; seed 003, AtlasDB ADR 16), for `canopy bench status`:
//
//   - HotSpots: a 3-node cluster whose status table is split into 4, 8 and
//     16 ranges; the share of the status records of a run of consecutive
//     commits that each range and each node (as leaseholder) took, v1
//     against tickets.
//   - Size: status records written straight into a storage.Engine through
//     an encoding (no cluster: 10^7 transactions through Raft would take
//     hours on the machines this runs on); bytes per record on disk, the
//     tables' total, data, index and filter sizes after a full compaction.
//   - Latency: point lookups of status records in such a store (block cache
//     small, so blocks come from the files), at a concurrency and a hit
//     rate, p50/p95/p99, for each store setting (encoding, status-table
//     filter, block size): the shape of the record's two 6x6 tables.
//   - Loaders: a cell set (100 rows x 100 static columns, 1,000 x 10
//     static, 16 x 500 dynamic) written into a cluster's status table and
//     read back with per-column loading (CL1), full batching and selective
//     batching (CL2), by one reader or ten at once.
//   - EndToEnd: a scan over keys holding intents of committed but
//     unresolved transactions, with batched status lookups and the cache
//     against one lookup per transaction and no cache.
//
// Every experiment is bounded in time and count by its options. Results
// are Tables: printed, written as CSV, and drawn (plot) by the command.
// Figures are only comparable within one run on one machine.
package statusbench
