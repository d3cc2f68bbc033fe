// Package testcluster starts clusters of real Canopy nodes inside one
// process (real Pebble stores in a directory, real gRPC over loopback), to
// be stopped and restarted one node at a time. Tests and `canopy demo`
// use it. Subpackage check holds the history checkers.
//
// Besides the cluster (cluster.go), it offers what cluster tests need to
// judge a run: History (history.go) records operations on one monotonic
// clock and classifies outcomes for the checkers, and
// Cluster.CheckReplicas (replicas.go) checks invariant I5 from one engine
// snapshot per node.
//
// # The cluster tests (package testcluster_test)
//
// Each starts its own three-node cluster, runs a workload bounded by an
// operation count (never by time), injects faults by progress (a nemesis:
// node stopped and restarted, Raft links dropped or delayed both ways, a
// range split) and checks the recorded history and the final state:
//
//	TestBankLeaderKill, ...ValueSeparation, TestBankPartition,
//	TestBankManyFaults, TestBankAbortRaces, TestBankQuorumLoss
//	                        transfers with receipts: total kept, no
//	                        acknowledged transfer lost, no phantom one,
//	                        balances replay from the receipts (I1, I2, I3),
//	                        then I5
//	TestLinearizableSingleKeyOps, TestLinearizablePartition,
//	TestLinearizableWithTransactions
//	                        porcupine on Get/Put/Delete (and one-key
//	                        transactions)
//	TestSerializableListAppend, TestSnapshotIsolationListAppend
//	                        Elle-style list-append histories (I3)
//	TestOracleMonotonicAcrossFailover
//	                        timestamps strictly increase in real time (I4)
//	TestLaggingReplicaCatchesUpBySnapshot
//	                        catch-up past a truncated log, then I5
//	TestAbandonedTransactionIsRecovered, TestLimitsAreInvalidArgument,
//	TestRoutingAroundPartitionedNode
//
// Waits are liveness waits with deadlines of tens of seconds; no timing
// decides a pass. Randomized parts print their seed; CANOPY_SEED replays
// the workload's choices (not the cluster's timing). -short shrinks the
// workloads.
package testcluster
