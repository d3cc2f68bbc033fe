package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// Commit commits the transaction. It returns nil exactly when the
// transaction committed. *RetryableError: it aborted (a conflict, or
// another transaction aborted it) and may be run again. ErrAmbiguous: the
// commit's outcome is unknown even after looking it up. Any other error:
// it did not commit.
//
// A transaction that wrote nothing commits without any request: its reads
// were a consistent snapshot at start_ts.
func (t *Txn) Commit(ctx context.Context) error {
	t.opMu.Lock()
	t.mu.Lock()
	if t.mu.state != txnPending {
		s := t.mu.state
		t.mu.Unlock()
		t.opMu.Unlock()
		return invalidArgf("transaction %d is %s", t.startTs, s)
	}
	t.mu.state = txnCommitting
	poisoned := t.mu.err
	wrote := len(t.mu.writeKeys) > 0
	t.mu.Unlock()
	t.opMu.Unlock()
	if poisoned != nil {
		_, _ = t.abort(ctx)
		return poisoned
	}
	if !wrote && !t.heartbeatWritten() {
		t.finish(ctx, decision{commitTs: t.startTs})
		return nil
	}
	commitTs, err := t.writer.commit(ctx)
	switch {
	case err == nil:
		t.finish(ctx, decision{commitTs: commitTs})
		return nil
	case errors.Is(err, ErrAmbiguous):
		t.stopHeartbeat()
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
		return publicError(err)
	}
}

// commitStatusTable is the default protocol's commit (DESIGN.md step 4):
//
//  1. commit_ts from the oracle;
//  2. serializable: refresh every read key and span over (start_ts,
//     commit_ts] at its range; a change means abort (retryable);
//  3. put-unless-exists(status key, committed at commit_ts): the commit
//     point. Success: committed. An existing value decides instead (it can
//     only be "aborted", written by a reader after our heartbeat expired).
//  4. If the put's outcome is unknown: read the status. Present: it
//     decides. Absent: put-unless-exists(aborted), whose outcome (or the
//     value it finds) decides. Only if these fail too is the result
//     ErrAmbiguous. The closure is never rerun before this is settled.
func (t *Txn) commitStatusTable(ctx context.Context) (uint64, error) {
	db := t.db
	commitTs, err := db.oracle.timestamp(ctx)
	if err != nil {
		return 0, err
	}
	if t.opts.Isolation == Serializable {
		if err := t.refreshReads(ctx, commitTs); err != nil {
			return 0, err
		}
	}
	v, err := db.statusValue(t.startTs, commitTs)
	if err != nil {
		return 0, err
	}
	ok, existing, err := db.putUnlessExists(ctx, db.statusKey(t.startTs), v)
	if err != nil {
		return t.lookupUnknownCommit(ctx, err, commitTs)
	}
	if ok {
		return commitTs, nil
	}
	return t.decideBy(existing, commitTs)
}

// decideBy reads a decision from an existing status value.
func (t *Txn) decideBy(existing []byte, ourCommitTs uint64) (uint64, error) {
	c, aborted, err := t.db.decodeStatus(t.startTs, existing)
	if err != nil {
		return 0, err
	}
	if aborted {
		return 0, &RetryableError{Reason: ReasonAborted, Ts: t.startTs,
			Msg: "another transaction aborted this one (its heartbeat had expired)"}
	}
	if c != ourCommitTs {
		// Only this transaction writes its committed value, once; the table
		// is the truth all the same.
		t.db.opts.Logger.Warn("canopy client: status table holds another commit timestamp for this transaction",
			"start_ts", t.startTs, "ours", ourCommitTs, "recorded", c)
	}
	return c, nil
}

// lookupUnknownCommit settles a commit point whose put failed with cause.
// Only ErrUnavailable proves the put was never applied; anything else may
// have applied it.
func (t *Txn) lookupUnknownCommit(ctx context.Context, cause error, commitTs uint64) (uint64, error) {
	db := t.db
	mayHaveApplied := !errors.Is(cause, ErrUnavailable)
	// The caller's context may be what ended the put; the lookup is needed
	// all the same, so it gets its own bound.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), db.opts.AbortTimeout)
	defer cancel()
	unknown := func(err error) (uint64, error) {
		if mayHaveApplied {
			return 0, fmt.Errorf("%w: commit of transaction %d: %w; status lookup failed: %w", ErrAmbiguous, t.startTs, cause, err)
		}
		return 0, cause
	}
	found, v, err := db.plainGet(lctx, db.statusKey(t.startTs))
	if err != nil {
		return unknown(err)
	}
	if mayHaveApplied {
		db.stats.ambiguousResolved.add(1)
	}
	if found {
		return t.decideBy(v, commitTs)
	}
	d, err := db.abortTxn(lctx, t.startTs)
	if err != nil {
		return unknown(err)
	}
	if d.aborted() {
		return 0, &RetryableError{Reason: ReasonAborted, Ts: t.startTs,
			Msg: "commit outcome was unknown; settled by recording the transaction as aborted"}
	}
	return d.commitTs, nil
}

// refreshReads runs the serializable commit check. Intents the servers
// report are resolved (waiting for live transactions, bounded) and the
// check repeated.
func (t *Txn) refreshReads(ctx context.Context, commitTs uint64) error {
	t.mu.Lock()
	spans := append([]*rpcpb.Span(nil), t.mu.reads...)
	t.mu.Unlock()
	if len(spans) == 0 {
		return nil
	}
	db := t.db
	for round := 0; ; round++ {
		err := db.sender.refresh(ctx, spans, t.startTs, commitTs, t.startTs)
		if err == nil {
			return nil
		}
		var ke *kvError
		if !errors.As(err, &ke) {
			return err
		}
		if len(ke.pb.GetIntents()) > 0 && round < db.opts.IntentRoundsMax {
			if err := db.resolveForeign(ctx, ke.pb.GetIntents(), t.waiter()); err != nil {
				return err
			}
			continue
		}
		return &RetryableError{Reason: ReasonReadConflict, Ts: ke.pb.GetExistingTs(), Msg: ke.pb.GetMessage()}
	}
}
