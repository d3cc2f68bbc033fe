// Package concurrency is the concurrency control a range's leaseholder runs
// before it evaluates a request: a latch manager (latch.go), which
// serializes requests whose key spans overlap while they evaluate, and a
// lock table (lock_table.go), which records the locks transactions hold
// until they finish, queues the requests that wait for them and breaks
// deadlocks (deadlock.go).
//
// Latches and locks are different things (docs/glossary.md): a latch is
// held by one request, only while it evaluates and its result applies; a
// lock is held by a transaction, from the write of its intent (or its
// shared lock) until the intent is resolved, across many requests.
//
// # The request path
//
// The model is CockroachDB's pkg/kv/kvserver/concurrency. For each request
// the leaseholder:
//
//  1. Declares its spans: every key or span it reads (Read) or writes
//     (Write), and the lock strength it needs on each key.
//  2. Acquires latches (LatchManager.Acquire). From here until step 8 no
//     conflicting request evaluates, so what it reads in step 3 stays
//     true while it evaluates.
//  3. Checks the lock table: LockTable.Enqueue on each key it touches. A
//     nil Waiter means there is nothing to wait for.
//  4. If a Waiter was returned: release the latches first (a request that
//     waited for a lock while holding latches would block the very
//     requests, such as intent resolution, that release the lock; the
//     detector cannot see such a wait), then LockTable.Wait. On nil,
//     go back to step 2 and check again: a woken waiter holds a claim,
//     so it keeps its place at the head of the queue while it does. On
//     ErrDeadlock, abort the transaction (retryable); on ErrCleared, the
//     leaseholder moved: retry elsewhere. Bound the wait by ctx.
//  5. Evaluates under its latches. If evaluation finds an intent the table
//     does not know (written before a restart or lease change), it calls
//     AddDiscovered and goes back to step 3.
//  6. Proposes the result to Raft.
//  7. Applies it. For each intent or shared lock written, Acquire records
//     the lock (still under latches, so no one saw the gap). Then
//     Dequeue every Waiter the request still has, in every outcome, so
//     that the claims it held end.
//  8. Releases its latches (LatchManager.Release).
//  9. Later, when the transaction's intents are resolved (it committed or
//     aborted), Release or ReleaseTxn releases its locks and wakes the
//     next waiters.
//
// When the replica loses its lease, Clear the lock table: every waiter
// completes with ErrCleared and the next leaseholder rebuilds the table
// from the intents it meets (step 5).
//
// # Lock order
//
// LockTable.mu, then Detector.mu; never the reverse, and never two
// LockTable mutexes at once (a deadlock victim queued in another table is
// completed after the first table's mutex is released). LatchManager.mu
// is a leaf. None of them is held while blocking: waiting is on channels,
// outside every mutex.
//
// # Limits
//
//   - Config.LocksMax (default LocksMaxDefault): keys a lock table tracks;
//     past it Acquire returns ErrLockTableFull and AddDiscovered forgets.
//   - Config.WaitersMax (default WaitersMaxDefault): queued waiters per
//     lock table; past it Enqueue returns ErrTooManyWaiters. This also
//     bounds the waits-for graph and so the cost of deadlock detection.
//   - Latches: as many as the declared spans of the requests in flight,
//     which the server bounds when it admits requests.
//
// # No clocks, no goroutines
//
// Nothing in this package reads a clock, draws a random number that
// decides an outcome, or starts a goroutine. Every wait is bounded by the
// caller's context; deadlocks are detected synchronously when a waits-for
// edge is added. The same sequence of calls gives the same result, which
// the datadriven tests in testdata/ rely on.
package concurrency
