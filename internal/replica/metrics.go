package replica

import "sync/atomic"

// readIndexRounds counts the ReadIndex rounds issued for waiting callers
// (ReadIndex), not the lease renewals issued in the background.
type readIndexRounds struct{ atomic.Uint64 }

// ReadIndexRounds is the number of ReadIndex rounds this replica issued,
// as leader, for callers waiting in ReadIndex (a read without a valid
// lease, the oracle confirming its leadership, a meta lookup): one round
// serves every caller queued when it is issued. Each is a round trip to a
// quorum that a request waited for, though no log entry. Lease renewals
// in the background are not counted. For benchmarks (canopy bench
// pipeline).
func (r *Replica) ReadIndexRounds() uint64 { return r.readIndexRounds.Load() }
