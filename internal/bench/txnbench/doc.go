// Package txnbench measures two-key read-modify-write transactions: each
// transaction reads the balances of two keys chosen at random and writes
// both, moving one unit from one to the other (a bank transfer). The same
// workload runs on any system that implements Store: Canopy (Canopy, with
// client.DB.Txn, serializable) and etcd (internal/bench/etcdbench, with a
// compare-and-swap on both keys' revisions). `canopy bench txn` drives it.
//
// Contract for callers:
//
//  1. Load writes every key of the keyspace once, each value holding the
//     balance InitialBalance in its first 8 bytes (big-endian, signed) and
//     random bytes after, Options.ValueBytes in all (at least 8).
//  2. Run runs the transfers at one concurrency and returns a
//     kvbench.Result (through kvbench.Drive: bounded by Options.Duration
//     and Options.OpsMax, after an uncounted Options.Warmup). Ops counts
//     committed transactions; Retries counts the attempts after the first
//     of every counted transaction, committed or failed.
//  3. Check reads every key and verifies that the balances still sum to
//     Keys x InitialBalance: transfers preserve the total whatever
//     commits, fails or ends ambiguous, as long as each one is atomic.
//     A changed total is ErrTotalChanged.
//
// Keys are distinct from kvbench's ("txnbench/" instead of "kvbench/",
// after the same leading hash byte), so the single-key workloads and this
// one can share a cluster without overwriting each other's values.
//
// Benchmarks measure; nothing here decides whether a test passes.
package txnbench
