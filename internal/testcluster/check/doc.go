// Package check holds the history checkers that the cluster tests run on
// recorded histories. Every checker is a pure function of its input: it starts
// no goroutine of its own (porcupine starts some internally, bounded by the
// timeout), needs no cluster and reads no clock except for porcupine's search
// limit. A test records what its clients did, then hands the record here.
//
// # What is checked
//
//   - [CheckLinearizable]: single-key get/put/del operations are
//     linearizable (porcupine, partitioned by key).
//   - [CheckListAppend]: multi-key transactions over append-only lists are
//     serializable (invariant I3), in the manner of Jepsen's Elle.
//   - [CheckRegister]: multi-key transactions over read/write registers are
//     serializable (I3).
//   - [CheckBankTotal]: the bank workload's total is conserved.
//
// # The caller's contract
//
//  1. Record every operation a client started, including the ones whose
//     result it never learned. Leaving out a write with an unknown outcome
//     turns a correct history into a false "violation" as soon as someone
//     reads what it wrote.
//  2. Classify each outcome honestly. For single-key operations: OK (it
//     happened and the result is known), Failed (it definitely did not take
//     effect, e.g. a typed error that guarantees no effect), Unknown (timeout,
//     lost connection, ambiguous-result error: it may or may not have taken
//     effect). For transactions: Committed means the commit was acknowledged;
//     Ambiguous means the commit outcome is unknown; neither means the
//     transaction definitely did not commit. When in doubt, say Unknown or
//     Ambiguous: that only costs checking power, never soundness.
//  3. Make written values unique per key: list elements and register
//     values must be (a read names its writer by value); put values need
//     not be, but unique ones make a failure far easier to read.
//  4. Take Call and Return timestamps from one monotonic clock shared by all
//     clients of the history (time.Since(start) of one start instant), Call
//     before sending the request, Return after receiving the reply.
//
// # How results are reported
//
// The linearizability checker returns ok, a one-line info and an error. An
// error means "no verdict": the history was malformed ([ErrInvalidHistory]),
// an option was invalid ([ErrInvalidArgument]) or porcupine ran out of time
// ([ErrCheckTimeout]); a test must treat that as a failure to check, never as
// a pass. [CheckBankTotal] returns an error wrapping [ErrBankTotal].
//
// The serializability checkers return ok and a list of anomalies, each a
// one-line string that starts with its class, so that tests can match on it:
//
//	malformed:              the record itself is invalid (duplicate IDs,
//	                        unknown kinds, non-unique written values ...);
//	                        nothing else is checked
//	G0:                     a cycle of write-write edges only (dirty write)
//	G1a:                    aborted read: a committed transaction observed a
//	                        write of a transaction that did not commit
//	G1b:                    intermediate read: an observed write was not the
//	                        writer's last write to that key
//	G1c:                    a cycle of write-write and write-read edges
//	G2 (G-single):          a cycle with exactly one read-write
//	                        (anti-dependency) edge; forbidden by snapshot
//	                        isolation too (lost update, read skew)
//	G2:                     a cycle with two or more read-write edges, e.g.
//	                        write skew, which snapshot isolation permits
//	incompatible order:     two reads of one list are not prefixes of one
//	                        another
//	duplicate elements:     a read list holds one element twice
//	garbage read:           a read observed a value that nobody wrote
//	internal inconsistency: a transaction's read disagrees with its own
//	                        earlier reads and writes
//	duplicate commit_ts:    two writers of one key share a commit timestamp
//
// A cycle is written with its edge kinds, e.g.
// "G2 (G-single): T3 -rw-> T5 -wr-> T3 (keys "x", "y")", where Tn is the
// TxnRecord.ID and the keys are listed edge by edge. Each class is capped at
// [AnomaliesPerClassMax] lines; a final line says how many more were found.
//
// # What is trusted
//
// Only the reads of acknowledged-committed transactions are evidence. Reads of
// aborted transactions may legitimately be inconsistent (an optimistic
// protocol validates at commit), and reads of ambiguous transactions may come
// from an attempt that did not commit, so both are ignored, as Elle does. The
// writes of an ambiguous transaction join the history only if some trusted
// read observed one of them (then it committed); otherwise they are dropped.
package check
