package kvserver

// Latches: each range's leaseholder serialises requests that touch
// overlapping keys with a concurrency.LatchManager (rangeReplica.latches).
// A write holds its latches from before evaluation until its Raft command
// has applied here (or is known never to apply), so that no request
// evaluates on a key whose last write is still in flight. A read holds its
// latches only until it has its engine snapshot.
//
// A Put takes its timestamp after latching its key: every read with a
// higher timestamp started later, so it waits for the Put and sees it.
