package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// Commit commits the transaction. It returns nil exactly when the
// transaction committed. *RetryableError: it aborted (a conflict, or
// another transaction aborted it) and may be run again. ErrAmbiguous: the
// commit's outcome is unknown even after looking it up (also when the
// commit failed after its commit point may have applied and the rollback
// that would settle it failed too). Any other error: it did not commit.
//
// A transaction that wrote nothing and holds no lock commits without any
// request: its reads were a consistent snapshot at start_ts.
func (t *Txn) Commit(ctx context.Context) error {
	if t.hier != nil {
		return t.hierCommit(ctx) // txn_hierarchy.go
	}
	poisoned, err := t.startCommit()
	if err != nil {
		return err
	}
	t.mu.Lock()
	wrote := len(t.mu.writeKeys) > 0
	// A transaction holding locks (2pc-locking's reads) lets its protocol
	// decide even when it wrote nothing: its reads may need a check.
	locked := len(t.mu.lockKeys) > 0
	t.mu.Unlock()
	if poisoned != nil {
		_, _ = t.abort(ctx)
		return poisoned
	}
	if !wrote && !locked && !t.hb.written() {
		t.finish(ctx, decision{commitTs: t.startTs})
		return nil
	}
	resp, err := t.send(ctx, &txnReq{op: opCommit})
	switch {
	case err == nil && resp.implicit:
		t.finishStaged(ctx, resp.ts)
		return nil
	case err == nil:
		t.finish(ctx, decision{commitTs: resp.ts})
		return nil
	case errors.Is(err, ErrAmbiguous):
		t.hb.stop()
		t.setState(txnUnknown)
		t.db.stats.ambiguous.add(1)
		return err
	default:
		// Not committed (or aborted by another): record the abort. If the
		// status says committed after all, that is the truth (I1).
		d, aerr := t.abort(ctx)
		if aerr == nil && !d.aborted() {
			return nil
		}
		if errors.Is(aerr, errCommitMayHaveApplied) {
			// The rollback failed and our commit point may have applied
			// (txnCommitter.rollbackFailed): err is no proof of failure.
			t.setState(txnUnknown)
			t.db.stats.ambiguous.add(1)
			return fmt.Errorf("%w: commit of transaction %d failed (%v) after its commit point may have applied, and the rollback failed: %v",
				ErrAmbiguous, t.startTs, publicError(err), aerr)
		}
		return publicError(err)
	}
}

// startCommit moves a pending transaction to committing, after which no
// operation is taken, and returns the error that poisoned it (nil: none);
// a transaction in any other state is refused.
func (t *Txn) startCommit() (poisoned, err error) {
	t.opMu.Lock()
	defer t.opMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.state != txnPending {
		return nil, invalidArgf("transaction %d is %s", t.startTs, t.mu.state)
	}
	t.mu.state = txnCommitting
	return t.mu.err, nil
}

// txnCommitter is the layer that decides (txn_layers.go): the default
// protocol's commit (DESIGN.md step 4), on opCommit:
//
//  1. commit_ts from the oracle (opTimestamp);
//  2. the refresh of every read over (start_ts, commit_ts] (opRefresh,
//     which the refresher below fills with the read set; serializable
//     only); a change means abort (retryable);
//  3. put-unless-exists(status key, committed at commit_ts) (opPutStatus):
//     the commit point. Success: committed. An existing value decides
//     instead (it can only be "aborted", written by a reader after our
//     heartbeat expired).
//     With parallel commits (the pipeliner hands the in-flight writes down
//     in proofs), instead: put-unless-exists of a STAGING record
//     (opPutStaging) in parallel with the proofs (opProve); both done:
//     implicitly committed, answered at once (implicit; Txn records
//     COMMITTED before any intent is resolved). A FENCE found: the
//     ordinary commit point after the proofs. Anything else: recovery of
//     our own record (opRecover), never a blind abort.
//  4. If the put's outcome is unknown: read the status (opGetStatus).
//     Present: it decides. Absent: put-unless-exists(aborted), whose
//     outcome (or the value it finds) decides. Only if these fail too is
//     the result ErrAmbiguous. The closure is never rerun before this is
//     settled.
//
// On opCommitOnePC (txn_onepc.go) it sends the one-phase commit (opOnePC)
// and settles a lost reply at the range (opQueryOnePC), never in the
// status table: a 1PC transaction has no status record, and writing
// "aborted" there for a batch that applied would break I1.
//
// On opAbort it writes "aborted" with put-unless-exists and returns the
// decision that holds (an existing commit wins); after a one-phase commit
// whose outcome stayed unknown, it asks the range again instead. Its only
// state is that one-phase commit's first key.
type txnCommitter struct {
	next    txnLayer
	startTs uint64
	// abortTimeout bounds the status lookup after an unknown outcome
	// (Options.AbortTimeout), which runs even if the caller's ctx ended.
	abortTimeout time.Duration
	logger       *slog.Logger
	stats        *stats
	// onePCKey is the first key of the one-phase commit sent, nil if none.
	// stagedTs and staged are the commit timestamp and writes of the
	// STAGING record we may have written (0, nil: none). Set and read
	// only on opCommit, opCommitOnePC and opAbort, which Txn sends alone.
	onePCKey []byte
	stagedTs uint64
	staged   []inFlightWrite
	// recovered is the decision our own recovery reached (final), so
	// that the abort after a failed parallel commit does not recover again.
	recovered *decision
	// putOpen: the COMMITTED put was sent and its outcome is not settled
	// (it may have applied). Cleared when the put or the lookup after it
	// decides, or when its error proves it never applied. With stagedTs
	// (and no recovered decision) it is what pointMayHaveApplied reports.
	putOpen bool
	// stepHook is Options.TestingCommitStep.
	stepHook func(startTs uint64, step string)
}

func (c *txnCommitter) send(ctx context.Context, r *txnReq) (*txnResp, error) {
	switch r.op {
	case opCommit:
		return c.commit(ctx, r.proofs)
	case opCommitOnePC:
		c.onePCKey = r.writes[0].Key
		resp, err := c.next.send(ctx, &txnReq{op: opOnePC, writes: r.writes})
		if err == nil {
			return &txnResp{ts: resp.ts}, nil
		}
		if errors.Is(err, errOnePCIneligible) {
			c.onePCKey = nil
			return nil, err
		}
		if !errors.Is(err, ErrAmbiguous) {
			return nil, err
		}
		d, err := c.settleOnePC(ctx, err)
		if err != nil {
			return nil, err
		}
		if d.aborted() {
			return nil, &RetryableError{Reason: ReasonAborted, Ts: c.startTs,
				Msg: "one-phase commit's outcome was unknown; settled as never applied"}
		}
		return &txnResp{ts: d.commitTs}, nil
	case opAbort:
		if c.stagedTs != 0 {
			// Our STAGING record may be there: only recovery may decide
			// (an implicit commit must not be overwritten by ABORTED).
			d, err := c.recoverOwn(ctx)
			if err != nil {
				return nil, c.rollbackFailed(err)
			}
			return &txnResp{d: d}, nil
		}
		if c.onePCKey != nil {
			d, err := c.settleOnePC(ctx, fmt.Errorf("%w: rollback after an unknown outcome", ErrAmbiguous))
			if err != nil {
				return nil, err
			}
			return &txnResp{d: d}, nil
		}
		pr, err := c.next.send(ctx, &txnReq{op: opPutStatus, ts: txnstatus.Aborted})
		if err != nil {
			return nil, c.rollbackFailed(err)
		}
		c.putOpen = false
		if pr.won {
			return &txnResp{d: decision{commitTs: txnstatus.Aborted}}, nil
		}
		return &txnResp{d: pr.d}, nil
	}
	return c.next.send(ctx, r)
}

// errCommitMayHaveApplied marks (beside ErrAmbiguous) a rollback that
// failed after a commit point of ours may have applied: Txn.Commit then
// reports its failed commit as ErrAmbiguous, not as a definite failure.
var errCommitMayHaveApplied = errors.New("client: the commit point may have applied")

// pointMayHaveApplied reports whether a commit point of ours (the
// COMMITTED put, or a STAGING record that recovery has not settled) may
// have applied without our knowing the decision.
func (c *txnCommitter) pointMayHaveApplied() bool {
	return c.putOpen || (c.stagedTs != 0 && c.recovered == nil)
}

// rollbackFailed is the error of an opAbort that failed with err: if our
// commit point may have applied, the transaction's outcome is unknown
// (ErrAmbiguous and errCommitMayHaveApplied; err by %v, since its class,
// ErrUnavailable say, speaks only of the rollback); otherwise err, as the
// commit certainly did not apply. Rollback after a commit failure used to
// leave err alone, so that Txn.Commit returned its commit error as a
// definite failure even when the commit point may have applied (a status
// record that could not be read back after an unknown put outcome).
func (c *txnCommitter) rollbackFailed(err error) error {
	if !c.pointMayHaveApplied() || errors.Is(err, ErrAmbiguous) && errors.Is(err, errCommitMayHaveApplied) {
		return err
	}
	return fmt.Errorf("%w: %w: transaction %d: rollback failed: %v", ErrAmbiguous, errCommitMayHaveApplied, c.startTs, err)
}

func (c *txnCommitter) commit(ctx context.Context, inFlight []inFlightWrite) (*txnResp, error) {
	tr, err := c.next.send(ctx, &txnReq{op: opTimestamp})
	if err != nil {
		return nil, err
	}
	commitTs := tr.ts
	if _, err := c.next.send(ctx, &txnReq{op: opRefresh, ts: commitTs}); err != nil {
		return nil, err
	}
	if len(inFlight) > 0 && stagingBytes(inFlight) <= stagingBytesMax {
		return c.parallelCommit(ctx, commitTs, inFlight)
	}
	if len(inFlight) > 0 {
		// Too many staged keys for one STAGING value: prove first, then
		// the ordinary commit point (safe: commit_ts was taken after every
		// write was answered, see parallelCommit).
		pr, err := c.next.send(ctx, &txnReq{op: opProve, proofs: inFlight})
		if err != nil {
			return nil, err
		}
		for i := range inFlight {
			if i >= len(pr.proven) || !pr.proven[i] {
				return nil, c.missingWrite(inFlight, pr.proven)
			}
		}
	}
	ts, err := c.putCommitted(ctx, commitTs)
	if err != nil {
		return nil, err
	}
	return &txnResp{ts: ts}, nil
}

// parallelCommit writes the STAGING record and proves the in-flight writes
// at once. Both succeed: implicitly committed (the caller records
// COMMITTED before resolving anything). The STAGING put found a FENCE: a
// reader is aborting us and no STAGING record of ours exists, so the
// ordinary commit point decides, once the proofs are in (if they failed,
// the ABORTED put's outcome does: settleFenced). Anything else:
// the record may be there, so recovery decides (never a blind abort).
func (c *txnCommitter) parallelCommit(ctx context.Context, commitTs uint64, ws []inFlightWrite) (*txnResp, error) {
	c.step("staging")
	c.stagedTs, c.staged, c.recovered = commitTs, ws, nil
	var wg sync.WaitGroup
	var sr *txnResp
	var serr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		sr, serr = c.next.send(ctx, &txnReq{op: opPutStaging, ts: commitTs, proofs: ws})
		if serr == nil && sr.won {
			c.step("staged")
		}
	}()
	pr, perr := c.prove(ctx, ws)
	wg.Wait()
	proven := perr == nil && len(pr.proven) == len(ws)
	for i := 0; proven && i < len(ws); i++ {
		proven = pr.proven[i]
	}
	switch {
	case errors.Is(serr, errBadStatus):
		return nil, serr
	case serr == nil && sr.won && proven:
		c.step("proven")
		c.stats.parallelCommits.add(1)
		return &txnResp{ts: commitTs, implicit: true}, nil
	case serr == nil && sr.fenced:
		c.stagedTs, c.staged = 0, nil
		if perr != nil {
			return c.settleFenced(ctx, perr)
		}
		if !proven {
			return c.settleFenced(ctx, c.missingWrite(ws, pr.proven))
		}
		ts, err := c.putCommitted(ctx, commitTs)
		if err != nil {
			return nil, err
		}
		return &txnResp{ts: ts}, nil
	}
	d, err := c.recoverOwn(ctx)
	if err != nil {
		return nil, err
	}
	if d.aborted() {
		if perr == nil && !proven {
			return nil, c.missingWrite(ws, pr.proven)
		}
		return nil, &RetryableError{Reason: ReasonAborted, Ts: c.startTs,
			Msg: "parallel commit failed; recovery settled the transaction as aborted"}
	}
	return &txnResp{ts: d.commitTs}, nil
}

// settleFenced settles a parallel commit whose STAGING put was answered
// with a FENCE and whose proofs failed (cause): put-unless-exists of
// ABORTED, whose outcome or the decision it finds decides. A FENCE does
// not prove that no STAGING record of ours was written: the server also
// answers FENCE at an empty staging key whose status key holds a decision
// (status-table GC deletes decided transactions' records), so a resent
// STAGING put whose first attempt applied, after a reader recovered the
// transaction as COMMITTED (resolving its intents, so the proofs fail)
// and GC deleted the record, is answered FENCE. Returning cause then
// reported a committed transaction as not committed whenever the rollback
// could not reach the status table. If the put fails, the outcome is
// unknown: ErrAmbiguous.
func (c *txnCommitter) settleFenced(ctx context.Context, cause error) (*txnResp, error) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.abortTimeout)
	defer cancel()
	pr, err := c.next.send(lctx, &txnReq{op: opPutStatus, ts: txnstatus.Aborted})
	if errors.Is(err, errBadStatus) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: parallel commit of transaction %d fenced, its proofs failed (%v), and recording it as aborted failed: %v", ErrAmbiguous, c.startTs, cause, err)
	}
	if pr.won || pr.d.aborted() {
		return nil, cause
	}
	c.stats.ambiguousResolved.add(1)
	return &txnResp{ts: pr.d.commitTs}, nil
}

// prove proves ws with one request (the wire splits it per range, in
// parallel), or, with a TestingCommitStep hook, one write at a time with
// the hook called before each.
func (c *txnCommitter) prove(ctx context.Context, ws []inFlightWrite) (*txnResp, error) {
	if c.stepHook == nil {
		return c.next.send(ctx, &txnReq{op: opProve, proofs: ws})
	}
	out := &txnResp{}
	for i, w := range ws {
		c.step(fmt.Sprintf("proof %d", i))
		r, err := c.next.send(ctx, &txnReq{op: opProve, proofs: []inFlightWrite{w}})
		if err != nil {
			return nil, err
		}
		out.proven = append(out.proven, r.proven...)
	}
	return out, nil
}

// step calls the testing hook, if any.
func (c *txnCommitter) step(s string) {
	if c.stepHook != nil {
		c.stepHook(c.startTs, s)
	}
}

// stagingBytesMax bounds the STAGING value (keys.ValueBytesMax, less room
// for its header): the server refuses larger values. Options.
// PipelinedBytesMax may allow more in-flight key bytes than that; such a
// commit takes the ordinary path.
const stagingBytesMax = keys.ValueBytesMax - 1024

// stagingBytes is an upper bound of the STAGING value's size for ws.
func stagingBytes(ws []inFlightWrite) int {
	n := 16
	for _, w := range ws {
		n += len(w.key) + 8 + binary.MaxVarintLen64
	}
	return n
}

// missingWrite is the error of a parallel commit whose proofs found a
// write missing.
func (c *txnCommitter) missingWrite(ws []inFlightWrite, proven []bool) error {
	var missing []inFlightWrite
	for i, w := range ws {
		if i < len(proven) && !proven[i] {
			missing = append(missing, w)
		}
	}
	c.stats.pipelinedWritesFailed.add(int64(len(missing)))
	if len(missing) == 0 {
		return &RetryableError{Reason: ReasonPipelinedWriteFailed, Ts: c.startTs, Msg: "a proof found a write missing"}
	}
	return &RetryableError{Reason: ReasonPipelinedWriteFailed, Key: missing[0].key,
		Msg: fmt.Sprintf("%d of %d proofs found no intent (the first: the transaction's write %d): the replication failed", len(missing), len(ws), missing[0].seq)}
}

// recoverOwn settles our own parallel commit by recovery (recovery.go),
// on a context of its own: the caller's may be what ended the commit.
// Failure: ErrAmbiguous, since the STAGING record may be there with every
// write in place.
func (c *txnCommitter) recoverOwn(ctx context.Context) (decision, error) {
	if c.recovered != nil {
		return *c.recovered, nil
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.abortTimeout)
	defer cancel()
	rr, err := c.next.send(lctx, &txnReq{op: opRecover, ts: c.stagedTs, proofs: c.staged})
	if errors.Is(err, errBadStatus) {
		return decision{}, err
	}
	if err != nil {
		return decision{}, fmt.Errorf("%w: parallel commit of transaction %d: recovery failed: %w", ErrAmbiguous, c.startTs, err)
	}
	c.stats.ambiguousResolved.add(1)
	c.recovered = &rr.d
	return rr.d, nil
}

// putCommitted is the ordinary commit point: put-unless-exists of
// COMMITTED at commitTs, with the lookup after an unknown outcome.
func (c *txnCommitter) putCommitted(ctx context.Context, commitTs uint64) (uint64, error) {
	c.putOpen = true
	pr, err := c.next.send(ctx, &txnReq{op: opPutStatus, ts: commitTs})
	if errors.Is(err, errBadStatus) {
		// Our value does not encode, or the put found a record that does
		// not decode: a lookup would get no further. putOpen stays set:
		// the record that does not decode may be our own, damaged, after
		// an attempt whose answer was lost (the resend then finds it).
		return 0, err
	}
	if err != nil {
		return c.lookupUnknownCommit(ctx, err, commitTs)
	}
	c.putOpen = false
	if pr.won {
		return commitTs, nil
	}
	return c.decideBy(pr.d, commitTs)
}

// decideBy returns the outcome an existing decision gives us.
func (c *txnCommitter) decideBy(d decision, ourCommitTs uint64) (uint64, error) {
	if d.aborted() {
		return 0, &RetryableError{Reason: ReasonAborted, Ts: c.startTs,
			Msg: "another transaction aborted this one (its heartbeat had expired)"}
	}
	if d.commitTs != ourCommitTs {
		// Only this transaction writes its committed value, once; the table
		// is the truth all the same.
		c.logger.Warn("canopy client: status table holds another commit timestamp for this transaction",
			"start_ts", c.startTs, "ours", ourCommitTs, "recorded", d.commitTs)
	}
	return d.commitTs, nil
}

// lookupUnknownCommit settles a commit point whose put failed with cause.
// Only ErrUnavailable proves the put was never applied; anything else may
// have applied it.
func (c *txnCommitter) lookupUnknownCommit(ctx context.Context, cause error, commitTs uint64) (uint64, error) {
	// An ErrUnavailable that also says ErrAmbiguous (a write refused for
	// lack of disk after an attempt with an unknown outcome) may have
	// applied.
	mayHaveApplied := errors.Is(cause, ErrAmbiguous) || !errors.Is(cause, ErrUnavailable)
	c.putOpen = mayHaveApplied
	// The caller's context may be what ended the put; the lookup is needed
	// all the same, so it gets its own bound.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.abortTimeout)
	defer cancel()
	unknown := func(err error) (uint64, error) {
		if mayHaveApplied {
			return 0, fmt.Errorf("%w: commit of transaction %d: %w; status lookup failed: %w", ErrAmbiguous, c.startTs, cause, err)
		}
		return 0, cause
	}
	gr, err := c.next.send(lctx, &txnReq{op: opGetStatus})
	if errors.Is(err, errBadStatus) {
		return 0, err
	}
	if err != nil {
		return unknown(err)
	}
	if mayHaveApplied {
		c.stats.ambiguousResolved.add(1)
	}
	if gr.found {
		c.putOpen = false
		return c.decideBy(gr.d, commitTs)
	}
	pr, err := c.next.send(lctx, &txnReq{op: opPutStatus, ts: txnstatus.Aborted})
	if errors.Is(err, errBadStatus) {
		return 0, err
	}
	if err != nil {
		return unknown(err)
	}
	c.putOpen = false
	if pr.won || pr.d.aborted() {
		return 0, &RetryableError{Reason: ReasonAborted, Ts: c.startTs,
			Msg: "commit outcome was unknown; settled by recording the transaction as aborted"}
	}
	return pr.d.commitTs, nil
}

// settleOnePC learns the outcome of the one-phase commit whose reply was
// lost (cause) from its range: committed, or prevented from ever applying
// (aborted). If the range can no longer tell, or cannot be reached, the
// result is ErrAmbiguous.
func (c *txnCommitter) settleOnePC(ctx context.Context, cause error) (decision, error) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.abortTimeout)
	defer cancel()
	q, err := c.next.send(lctx, &txnReq{op: opQueryOnePC, key: c.onePCKey})
	if err != nil {
		return decision{}, fmt.Errorf("%w: one-phase commit of transaction %d: %w; settling it failed: %w", ErrAmbiguous, c.startTs, cause, err)
	}
	switch {
	case q.found:
		c.stats.ambiguousResolved.add(1)
		return decision{commitTs: q.ts}, nil
	case q.prevented:
		c.stats.ambiguousResolved.add(1)
		return decision{commitTs: txnstatus.Aborted}, nil
	}
	return decision{}, fmt.Errorf("%w: one-phase commit of transaction %d: %w; its range no longer records the outcome", ErrAmbiguous, c.startTs, cause)
}
