// Package bench holds Canopy's workloads and experiments. Subpackages:
// bank (transfers with a preserved total), latency (percentiles), kvbench
// (single-key throughput), vlogbench (value log GC, issue 3), plot (PNG
// line and bar charts for every benchmark). Machine describes where
// figures were measured; every benchmark prints it. Benchmarks measure;
// they never decide whether a test passes.
package bench
