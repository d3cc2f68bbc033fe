// Package tso is the timestamp oracle's deterministic core: it hands out
// strictly increasing 64-bit timestamps (start_ts, commit_ts) from an
// in-memory window below a Raft-replicated upper bound.
//
// A timestamp is physical milliseconds << LogicalBits plus a logical
// count, but never less than the last one plus 1: max(last+1,
// millis<<LogicalBits). (One exception: after a persist slower than
// BoundAhead, the requests that waited for it take the next timestamps of
// its window, last+1 on, which may then be below the clock; see Allocate.)
// The clock and the persistence of the bound are
// injected (Options.Clock, Persister), so the core does no I/O of its own.
// The server hosts one Oracle on every replica of range 1 and lets only the
// leaseholder use it; the bound lives at keys.OracleBoundKey.
//
// # Contract for the server
//
//  1. Implement Persister: CASBound as a Raft write that compares and sets
//     keys.OracleBoundKey and returns only after the entry is Raft
//     committed and applied (so the bound is durable on a majority, I2);
//     LoadBound as a linearizable read (ReadIndex).
//  2. Call Reset whenever this replica gains or loses leadership of range 1
//     (and on start-up, which New already implies). A new leader then loads
//     the bound and CASes past it before handing anything out.
//  3. Call Allocate only on the leaseholder, with count = the number of
//     timestamps a client batch asked for (clients batch their requests;
//     concurrent Allocates that need a new bound share one persist).
//  4. After Allocate returns and before replying, confirm leadership in
//     the term of the window: by a valid leader lease (no newer leader
//     can be elected while it runs; kvserver's allocateLocal and the
//     replica package's leaderLease, with its clock assumption), else by
//     Raft ReadIndex (a round of heartbeats acknowledged by a majority in
//     the current term). If neither confirms, drop the timestamps and
//     return an unavailable error; the client retries at the new leader.
//
// # Why timestamps strictly increase across leaders (I4)
//
// The stored bound only grows: every change is a successful
// CASBound(expected -> new) with new > expected, by some Oracle, and an
// Oracle wins a bound only if the bound it last saw is still the stored one.
// CAS thus makes the won windows disjoint and increasing: of two Oracles
// racing from the same stored bound, one wins and the other must reload.
//
//   - An old leader can only allocate below the bound it won: every
//     timestamp is below its Oracle's won bound, which is <= the stored bound
//     at that moment. So the stored bound is always above every timestamp
//     handed out so far.
//   - A new leader starts above the persisted bound: after Reset it loads the
//     stored bound L (above every timestamp handed out before the load),
//     raises its floor to L, and wins L -> L' before handing out anything,
//     so its first timestamp, and every later one, is above all earlier ones.
//   - An Oracle whose CAS fails (the bound moved under it: a newer leader
//     exists) gives up its window, raises its floor to the stored bound it
//     was told, and never hands out a timestamp <= it.
//   - Within one Oracle, timestamps grow from the floor "last", which never
//     decreases, not even across Reset.
//
// That gives uniqueness and order between leaders, but not real-time order:
// a deposed leader that has not yet noticed could still hand out a
// timestamp from its old window (below L) after the new leader handed out
// one above L. Step 4 closes that hole. A deposed leader's ReadIndex fails
// once a majority has moved to a newer term, and the new leader was elected
// by such a majority before it could load L; its lease has expired before
// any newer leader can be elected. So a timestamp of the old
// leader that reaches a client was allocated before its confirmation,
// hence before the new leader's load, hence it is below L and below every
// timestamp of the new leader: strict increase holds in real time across
// failover.
//
// A wall clock that jumps backwards, on one node or across a failover,
// does not break the argument: the floor (last, or the loaded bound) wins
// over the clock; timestamps then run ahead of the clock until it catches up.
//
// # How far timestamps run ahead of the wall clock
//
// Each persisted bound is max(clock+BoundAhead, request end+BoundAhead/16)
// (Oracle.targetBound), so a new leader, which starts just above the stored
// bound, is at most BoundAhead ahead of its clock (clocks in sync), however
// many host changes came before, unless two of them came less than
// BoundAhead/16 of wall time apart. Users of the physical part as a clock
// (etcd leases) rely on this bound.
//
// # Limits
//
// One Allocate returns at most Options.AllocateCountMax timestamps; one
// extension tries its CAS at most Options.CASAttemptsMax times; at most one
// extension per Oracle is in flight. Allocate waits for an extension only as
// long as its context allows.
package tso
