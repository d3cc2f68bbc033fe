// Package hierbench is the workload and the report of `canopy bench
// hierarchy`: the experiments of the hierarchical-validation thesis
// (seed 004, chapter 4) on Canopy's commit protocols.
//
// The thesis's setup (4.1): 8 data nodes, objects of 1,000 bytes
// populated before the run, keys drawn uniformly, transactions of 8
// updates (a read then a write of the same object) each on a different
// node, closed-loop clients. Here the 8 nodes run in one process, each
// leading one user range (the keyspace is pre-split into 8 ranges placed
// one per node), and every client RPC is delayed by an injected per-link
// one-way delay each way (Delayer), since the kernel here has no netem.
//
// A System is one system under test: a cluster commit protocol (chosen at
// init, so every system gets its own cluster) and, for the hierarchy's
// protocols, a batch size. Systems lists every system of the thesis's
// 4.2.1 with whether it is built; the hierarchy's are placeholders until
// their protocols exist (the hook: give them a Setup, see System).
//
// Run measures one point (a system at a number of clients) for a bounded
// time after a warm-up: committed transactions per second, mean and p99
// latency of a transaction (with its retries), aborted attempts, and what
// the system counted per committed transaction: client RPCs, and the
// commit protocol's messages and communication steps
// (client.Stats.ProtocolMessages, ProtocolSteps), beside the thesis's
// formulas. The report writes a table, a CSV and a PNG.
package hierbench
