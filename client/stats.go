package client

import "sync/atomic"

// countingInt is a counter safe for concurrent use.
type countingInt struct{ v atomic.Int64 }

func (c *countingInt) add(n int64) { c.v.Add(n) }
func (c *countingInt) load() int64 { return c.v.Load() }

// Stats are counters since Open, for progress lines and tests.
type Stats struct {
	// Commits counts committed transactions (read-only ones included).
	Commits int64
	// Aborts counts transaction attempts that ended aborted (rolled back,
	// lost a conflict, or found aborted by another).
	Aborts int64
	// Retries counts DB.Txn attempts after the first.
	Retries int64
	// Ambiguous counts operations that returned ErrAmbiguous, and commits
	// whose outcome was first unknown and then looked up (AmbiguousResolved).
	Ambiguous         int64
	AmbiguousResolved int64
	// AbortedOthers counts transactions this client aborted because their
	// heartbeat had expired.
	AbortedOthers int64
	// IntentsResolved counts ResolveIntent requests acknowledged.
	IntentsResolved int64
	// ResolveDropped counts decided transactions whose asynchronous intent
	// resolution was skipped (queue full past the caller's deadline, or the
	// DB closing); readers resolve those intents when they meet them.
	ResolveDropped int64
	// TimestampRPCs counts oracle RPCs (each serves a batch of callers).
	TimestampRPCs int64
	// PipelinedWrites counts transactional writes sent with pipelining
	// (answered once proposed); PipelineStalls the reads and writes that
	// first proved in-flight writes of their keys; PipelinedWritesFailed
	// the pipelined writes a proof found missing (each made its
	// transaction retry).
	PipelinedWrites       int64
	PipelineStalls        int64
	PipelinedWritesFailed int64
	// OnePCCommits counts transactions committed by one CommitOnePC
	// request (one-phase commit).
	OnePCCommits int64
	// ParallelCommits counts transactions acknowledged as implicitly
	// committed (STAGING record and proofs in parallel); Recovered the
	// STAGING transactions this client settled as a reader.
	ParallelCommits int64
	Recovered       int64
}

type stats struct {
	commits, aborts, retries, ambiguous, ambiguousResolved countingInt
	abortedOthers, intentsResolved, resolveDropped         countingInt
	pipelinedWrites, pipelineStalls, pipelinedWritesFailed countingInt
	onePCCommits, parallelCommits, recovered               countingInt
}

// Stats returns a snapshot of the counters.
func (db *DB) Stats() Stats {
	return Stats{
		Commits:           db.stats.commits.load(),
		Aborts:            db.stats.aborts.load(),
		Retries:           db.stats.retries.load(),
		Ambiguous:         db.stats.ambiguous.load(),
		AmbiguousResolved: db.stats.ambiguousResolved.load(),
		AbortedOthers:     db.stats.abortedOthers.load(),
		IntentsResolved:   db.stats.intentsResolved.load(),
		ResolveDropped:    db.stats.resolveDropped.load(),
		TimestampRPCs:     db.oracle.rpcs.load(),

		PipelinedWrites:       db.stats.pipelinedWrites.load(),
		PipelineStalls:        db.stats.pipelineStalls.load(),
		PipelinedWritesFailed: db.stats.pipelinedWritesFailed.load(),
		OnePCCommits:          db.stats.onePCCommits.load(),
		ParallelCommits:       db.stats.parallelCommits.load(),
		Recovered:             db.stats.recovered.load(),
	}
}
