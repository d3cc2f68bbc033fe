package client

import (
	"context"
	"sync"
	"sync/atomic"
)

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
	// Wounded counts younger live transactions this client's transactions
	// aborted rather than wait for (Options.IntentWoundAfter).
	Wounded int64
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
	// StatusLookupRequests counts the batched status-lookup requests sent
	// (lookupStatuses: one per selective-batching batch), and
	// StatusCacheHits the decisions it found in the cache instead.
	StatusLookupRequests int64
	StatusCacheHits      int64
	// ProtocolTxns counts the commits of distributed or local transactions
	// whose commit-protocol messages a protocol counted; ProtocolMessages
	// the messages of those commits (requests and replies, from the commit
	// request to the decision reaching every participant, as the thesis's
	// formulas 2.3, 3.4 count them: no reads, no status-table write), and
	// ProtocolSteps their communication steps (the longest chain of
	// messages each waited for, formulas 2.2, 3.3). Only protocols that
	// count (2pc-locking, and the hierarchy's) add to them.
	ProtocolTxns     int64
	ProtocolMessages int64
	ProtocolSteps    int64
}

type stats struct {
	commits, aborts, retries, ambiguous, ambiguousResolved countingInt
	abortedOthers, intentsResolved, resolveDropped         countingInt
	// wounded: younger live transactions aborted (wound-wait).
	wounded                                                countingInt
	pipelinedWrites, pipelineStalls, pipelinedWritesFailed countingInt
	onePCCommits, parallelCommits, recovered               countingInt
	statusLookups, statusCacheHits                         countingInt
	protocolTxns, protocolMessages, protocolSteps          countingInt
	retryReasons                                           retryReasons // metrics.go
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
		Wounded:           db.stats.wounded.load(),
		IntentsResolved:   db.stats.intentsResolved.load(),
		ProtocolTxns:      db.stats.protocolTxns.load(),
		ProtocolMessages:  db.stats.protocolMessages.load(),
		ProtocolSteps:     db.stats.protocolSteps.load(),
		ResolveDropped:    db.stats.resolveDropped.load(),
		TimestampRPCs:     db.oracle.rpcs.load(),

		StatusLookupRequests: db.stats.statusLookups.load(),
		StatusCacheHits:      db.stats.statusCacheHits.load(),

		PipelinedWrites:       db.stats.pipelinedWrites.load(),
		PipelineStalls:        db.stats.pipelineStalls.load(),
		PipelinedWritesFailed: db.stats.pipelinedWritesFailed.load(),
		OnePCCommits:          db.stats.onePCCommits.load(),
		ParallelCommits:       db.stats.parallelCommits.load(),
		Recovered:             db.stats.recovered.load(),
	}
}

// RoundCounter counts, for the requests sent with a context from
// WithRoundCounter (a transaction's operations and its commit, with every
// goroutine they start), the waits for a consensus round on that caller's
// critical path. A batch waits for a round when it writes without async
// consensus (a synchronous PutIntent, a status or STAGING
// put-unless-exists) or proves in-flight writes (QueryIntent: the
// leaseholder answers once the write's round is over). Batches in flight
// at once, as the proofs to several ranges or a STAGING record beside the
// proofs, are one round: a round starts when such a batch is sent while no
// other of the same counter is in flight. Each attempt of a batch counts
// (a resend is a wait of its own).
//
// Not counted: the oracle's Timestamps RPCs (sent on the DB's context for
// all waiting callers; Stats.TimestampRPCs), the one-phase commit's
// CommitOnePC, and the work done after the caller is answered (intent
// resolution, the COMMITTED record of a parallel commit, heartbeats). For
// benchmarks (canopy bench pipeline): it measures what the latency models
// of docs/design-notes.md predict.
type RoundCounter struct {
	mu struct {
		sync.Mutex
		// inFlight is the number of consensus-waiting batches sent and not
		// answered. Invariant: inFlight >= 0.
		inFlight int
		rounds   int64
		batches  int64
	}
}

// RoundCounts is what a RoundCounter counted.
type RoundCounts struct {
	// ConsensusRounds is the number of sequential waits for consensus;
	// ConsensusBatches the batches that waited (parallel ones each count).
	ConsensusRounds  int64
	ConsensusBatches int64
}

type roundCounterKey struct{}

// WithRoundCounter returns ctx carrying c: the requests sent with it (or
// with a context derived from it) are counted in c.
func WithRoundCounter(ctx context.Context, c *RoundCounter) context.Context {
	return context.WithValue(ctx, roundCounterKey{}, c)
}

// Counts returns the counts so far.
func (c *RoundCounter) Counts() RoundCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return RoundCounts{ConsensusRounds: c.mu.rounds, ConsensusBatches: c.mu.batches}
}

// waitForRound records the start of a batch sent with ctx that waits for
// a consensus round if waits, and returns the function to call when it is
// answered. Without a counter in ctx it does nothing.
func waitForRound(ctx context.Context, waits bool) (done func()) {
	c, _ := ctx.Value(roundCounterKey{}).(*RoundCounter)
	if c == nil || !waits {
		return func() {}
	}
	c.mu.Lock()
	if c.mu.inFlight == 0 {
		c.mu.rounds++
	}
	c.mu.inFlight++
	c.mu.batches++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.mu.inFlight--
		if c.mu.inFlight < 0 {
			panic("client: RoundCounter: more batches answered than sent")
		}
		c.mu.Unlock()
	}
}
