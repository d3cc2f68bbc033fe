// Package bench holds Canopy's workloads and experiments. Subpackages:
// bank (transfers with a preserved total), latency (percentiles), kvbench
// (single-key throughput), vlogbench (value log GC, issue 3). Benchmarks
// measure; they never decide whether a test passes.
package bench
