// Package nemesis runs a cluster of real `canopy start` processes under a
// schedule of injected faults while clients run a workload, then heals
// every fault and checks the recorded history with the checkers of
// internal/testcluster/check. `canopy nemesis` is its command line; the
// package's test is the short run of `go test ./...`.
//
// # Contract
//
//   - The nodes are processes of Config.Binary started with
//     --enable-fault-injection; link faults go through their /debug/fault
//     endpoint (kvserver's faultinject.go), process faults through signals
//     (SIGKILL then restart with the same store, SIGSTOP then SIGCONT).
//   - One fault at a time: inject, hold for FaultDuration, heal, then
//     Interval of quiet. Kinds are injected in turn; targets are chosen
//     from Seed.
//   - Every operation a client started is recorded (checker contract of
//     package check), including those cut short by the end of the run;
//     the outcome counts leave the latter out.
//   - A recovery time is from a heal to the first operation that was
//     called after the heal and succeeded. The quiet time after a heal
//     lasts at least Interval and until that success (at most
//     RecoveryMax); a heal without one is reported unrecovered, never as
//     a number.
//   - The verdict is a pass only if the history was checked and no
//     violation found: a checker that could not decide is a failure.
//   - Every process Run started is stopped before it returns (and killed
//     by the kernel if the nemesis itself dies, on Linux).
package nemesis
