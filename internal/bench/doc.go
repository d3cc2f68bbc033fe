// Package bench holds Canopy's workloads and experiments. Subpackages:
// bank (transfers with a preserved total), latency (percentiles), kvbench
// (single-key throughput, and Drive, the bounded multi-worker loop every
// workload runs in), txnbench (2-key read-modify-write transactions),
// etcdbench (the same workloads against etcd), compare (two systems' runs
// side by side), vlogbench (value log GC, issue 3), plot (PNG line and bar
// charts for every benchmark). Machine describes where figures were
// measured; every benchmark prints it. ProcessesCPU measures server
// processes outside the benchmark's own. Benchmarks measure; they never
// decide whether a test passes.
package bench
