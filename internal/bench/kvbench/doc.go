// Package kvbench measures single-key operations outside transactions:
// Put and Get of one key, issued by N concurrent workers, for a chosen
// value size and mix of reads and writes. `canopy bench kv` drives it.
//
// Contract for callers:
//
//  1. Load writes every key of the keyspace once, so that Gets find a
//     value of the chosen size (a Get that finds nothing is counted in
//     Result.NotFound: after Load it would be a bug).
//  2. Run runs one workload (a read percentage) at one concurrency and
//     returns its Result. A run ends when Options.Duration has been
//     measured or Options.OpsMax operations have completed, whichever
//     comes first: every run is bounded in both time and count.
//  3. Operations during Options.Warmup, at the start of each run, are done
//     but not counted.
//  4. Drive is the loop Run is built on, for other workloads (txnbench):
//     the same bounds, warm-up, counting and progress line, around any
//     operation that reports an Outcome.
//  5. With Options.ServerPIDs, each run also measures the CPU time of
//     those processes (a cluster outside this process) over its measured
//     time, into Result.ServerCPU; a process that cannot be read fails
//     the run.
//
// What is measured: the latency of one call of KV.Put or KV.Get as the
// caller sees it (client routing and retries included), and completed
// calls per second of measured time. Failed calls are counted in
// Result.Errors and kept out of the latencies and the throughput.
//
// Keys are chosen uniformly at random. Each key starts with one byte of a
// hash of its index, so that the keyspace's pre-split ranges (split evenly
// by first byte, keys.UserSplitKeys) and their leaseholders share the
// load. Values are slices of a random, incompressible pool.
//
// Benchmarks measure; nothing here decides whether a test passes.
package kvbench
