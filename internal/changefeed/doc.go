// Package changefeed is the deterministic core of Canopy's change feeds
// (issue 12): closed timestamps at a range's leaseholder, the per-range
// rangefeed processor (live events from applied commands, resolved
// timestamps), and the catch-up scan from MVCC history. kvserver hosts
// it (feed.go) and serves it over gRPC (rpcpb.Feed); client.DB.Watch
// merges the per-range streams.
//
// # Words
//
//   - closed timestamp (of a range, at its leaseholder): a timestamp at or
//     below which the range will accept no new write: every committed
//     version that appears in the range later has a greater timestamp,
//     except a version that resolves an intent already in the range
//     (the intent holds the resolved timestamp back instead).
//   - resolved timestamp (of a rangefeed): min(closed timestamp, the
//     oldest unresolved intent's start_ts - 1), never lowered: the promise
//     that no event at or below it will be emitted later.
//   - rangefeed: one watcher's stream of one range's committed changes
//     (key, value or deletion, commit timestamp) and resolved timestamps.
//
// # Closed timestamps (Tracker)
//
// Every timestamp Canopy writes at comes from the timestamp oracle, whose
// timestamps increase in real time (DESIGN.md I4, tso doc): a timestamp
// allocated after another was handed out is greater. So a leaseholder
// closes a timestamp c that the oracle handed out without pushing
// anything, provided that
//
//  1. every write that was being evaluated, or was proposed and has not
//     applied, when c is closed, had registered (Track) a bound L that the
//     oracle handed out before the write took its timestamp (a Put's or a
//     one-phase commit's write timestamp is taken after Track; an intent's
//     transaction takes its commit_ts only after the leaseholder answered
//     the PutIntent), and the closed timestamp is min(c, every tracked L):
//     such writes are above it;
//  2. a write that registers later takes its timestamp (or its
//     transaction's commit_ts) after c was handed out: it is above c;
//  3. no other leaseholder exists when c is closed (kvserver checks the
//     lease, or confirms leadership with ReadIndex, after c was handed
//     out): a later leaseholder's writes take timestamps after it was
//     elected, so above c;
//  4. a write is untracked (Token.Done) only after its command has applied
//     and its events were handed to the processor (replica.FlushObserver
//     runs before proposers learn), or when it is known never to apply.
//
// Hence no write is ever below the closed timestamp and none has to be
// pushed; kvserver still refuses (retryably) a write whose timestamp is
// not above the closed timestamp it last published, as a guard.
//
// Rejected: carrying the closed timestamp in every Raft command, with a
// side transport for idle ranges (CockroachDB). That is what followers
// need to serve reads or rangefeeds of their own; Canopy serves both only
// at the leaseholder, which knows its tracker, so a closed timestamp that
// never leaves the leaseholder is enough and costs nothing on ranges that
// nobody watches. A leader lease lapses while its range is quiescent, so
// a watched idle range confirms its leadership with ReadIndex (which
// wakes it) to close timestamps; unwatched ranges stay quiescent.
//
// # Processor
//
// A Processor lives at the leaseholder of a watched range, for one Raft
// term. Contract for the host:
//
//  1. Stage(index, ops) with the ops of every command applied while the
//     processor is installed, in log order (from the apply loop), and
//     Flush(index) once the engine batch holding them has committed.
//  2. Init(index, intents) once, with the intents of an engine snapshot
//     at applied index `index` whose ops were staged, if at all, at or
//     below it. Resolved timestamps start after Init.
//  3. SetClosed(ts) with closed timestamps obtained as above.
//  4. Register with the applied index of the engine snapshot the
//     registration's catch-up scan reads (taken under Locked, so that no
//     Flush runs in between): events at or below that index are in the
//     scan and are not delivered live. Only after Init, on a snapshot at
//     or above Init's index (ErrNotInitialized otherwise): the commands
//     applied before the processor was installed, and those Init drops
//     from the ones flushed meanwhile, are in no earlier snapshot's scan
//     nor live. (kvserver hands a processor out only once initialized.)
//  5. Stop(err) when the leaseholder loses its lease, the range splits
//     or the replica stops: every registration ends with err.
//
// Nothing here blocks the apply loop: a registration's buffer is bounded
// (Options.EventsMax, Options.BytesMax), and a registration that overflows
// it is cancelled with ErrSlowConsumer instead of stalling writers.
package changefeed
