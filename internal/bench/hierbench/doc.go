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
// The delay is a sleep, which Go's timers make about 1 ms where less is
// asked: the Delayer sums the time its sleeps took in fact, and each Point
// carries that realized delay (ClientDelay; LinkDelay for the validators'
// links, which the caller measures) beside the one asked for, and the
// CPU the process used (CPU).
//
// A System is one system under test: a cluster commit protocol (chosen at
// init, so every system gets its own cluster) and, for the hierarchy's
// protocols, a batch size. Systems lists every system of the thesis's
// 4.2.1; SystemByName also takes a hierarchy protocol with any batch
// ("hierarchy-locking/b25"), and ExpandSystems turns a batch-size sweep
// (the thesis's figure 4.7) into one system per batch.
//
// A point may mix local and distributed transactions (its distributed
// share): a distributed transaction updates one object on each node, a
// local one UpdatesPerTxn objects of one node (decided by that node's leaf
// alone under the hierarchy). Run reports each class as its own Point, and
// ShareRatios compares local transactions' latency with distributed ones
// added against that without (the target: local p99 within 10% at
// 50% distributed).
//
// Runner.Disjoint gives each client objects of its own, so that no two
// transactions conflict and all commit at their first attempt: the
// stand-in for the thesis's runs with validation logic off (4.2), which
// Canopy has no switch for (docs/BENCHMARKS.md says what differs).
// SystemRatios compares each system's throughput with 2pc-locking's at
// the same point.
//
// Runner.Think makes the clients pause between transactions (closed loop
// with think time): it keeps the offered load below what saturates the
// machine, so that a latency shows the protocol's waits more than the
// queue for the cores.
//
// Run measures one point (a system at a number of clients) for a bounded
// time after a warm-up: committed transactions per second, mean and p99
// latency of a transaction (with its retries), aborted attempts, and what
// the system counted per committed transaction: client RPCs, and the
// commit protocol's messages and communication steps
// (client.Stats.ProtocolMessages, ProtocolSteps), beside the thesis's
// formulas. The report writes a table, a CSV and a PNG.
package hierbench
