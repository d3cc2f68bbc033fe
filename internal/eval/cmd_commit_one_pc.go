package eval

import (
	"errors"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// CommitOnePC commits a transaction without intents in one proposal
// (one-phase commit; docs/design-notes.md). Under write latches on the
// written keys and read latches on the refresh spans, with commit_ts =
// Context.WriteTs (taken from the oracle after latching, as for Put):
//
//  1. the 1PC record of the first key: txn_start recorded -> answer its
//     commit_ts, writing nothing (a resend); refused -> WRITE_CONFLICT;
//  2. each written key: a committed version in (txn_start, commit_ts] or a
//     foreign intent -> WRITE_CONFLICT (the PutIntent rule);
//  3. each refresh span: a version in (txn_start, commit_ts] or a foreign
//     intent -> READ_CONFLICT (the Refresh rule);
//  4. committed versions at commit_ts, and (txn_start, commit_ts) in the
//     first key's record.
//
// A start below the GC threshold is refused (its reads may be gone), which
// is also what lets records forget refusals below it.
func init() {
	register(rpcpb.MethodCommitOnePC, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			p := ru.GetCommitOnePc()
			for _, w := range p.GetWrites() {
				add(pointSpan(w.GetKey(), concurrency.Write))
			}
			for _, sp := range p.GetRefreshSpans() {
				add(spanOf(sp.GetStart(), sp.GetEnd(), concurrency.Read))
			}
		},
		EvalWrite: evalCommitOnePC,
	})
}

func evalCommitOnePC(c Context, rw storage.ReadWriter, ru *rpcpb.RequestUnion, _ *Effects) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	p := ru.GetCommitOnePc()
	start := p.GetTxnStart()
	if start == 0 || len(p.GetWrites()) == 0 {
		return nil, rpcpb.NewError(rpcpb.ErrorCode_INVALID_ARGUMENT, "CommitOnePC needs a start timestamp and at least one write")
	}
	seen := make(map[string]struct{}, len(p.GetWrites()))
	for _, w := range p.GetWrites() {
		if _, dup := seen[string(w.GetKey())]; dup {
			return nil, rpcpb.NewError(rpcpb.ErrorCode_INVALID_ARGUMENT, "key %q is written twice in one CommitOnePC", w.GetKey())
		}
		seen[string(w.GetKey())] = struct{}{}
		if !ContainsKey(c.Desc, w.GetKey()) {
			return nil, Mismatch(c.Desc, w.GetKey())
		}
	}
	for _, sp := range p.GetRefreshSpans() {
		if !ContainsSpan(c.Desc, sp.GetStart(), sp.GetEnd()) {
			return nil, Mismatch(c.Desc, sp.GetStart())
		}
	}
	if start < c.GCThreshold {
		return nil, belowGC(c, start)
	}
	commitTs := c.WriteTs
	if commitTs <= start {
		return nil, rpcpb.NewError(rpcpb.ErrorCode_INTERNAL, "CommitOnePC of %d evaluated with write timestamp %d", start, commitTs)
	}
	k0 := p.GetWrites()[0].GetKey()
	rec, err := loadKeyRecord(rw, k0)
	if err != nil {
		return nil, Error(err)
	}
	if ct, ok := rec.onePCCommit(start); ok {
		return onePCResponse(ct), nil
	}
	if rec.refuses(start) {
		return nil, rpcpb.NewError(rpcpb.ErrorCode_WRITE_CONFLICT, "one-phase commit of transaction %d was refused at %q (its outcome was settled as not applied)", start, k0)
	}
	for _, w := range p.GetWrites() {
		if err := mvcc.Refresh(rw, w.GetKey(), nil, start, commitTs, start); err != nil {
			return nil, writeConflict(err)
		}
	}
	for _, sp := range p.GetRefreshSpans() {
		if err := mvcc.Refresh(rw, sp.GetStart(), sp.GetEnd(), start, commitTs, start); err != nil {
			return nil, Error(err)
		}
	}
	for _, w := range p.GetWrites() {
		if err := mvcc.PutCommitted(rw, w.GetKey(), w.GetValue(), w.GetDelete(), commitTs); err != nil {
			return nil, Error(err)
		}
	}
	rec.recordOnePC(start, commitTs)
	rec.pruneBelow(c.GCThreshold)
	if err := storeKeyRecord(rw, k0, rec); err != nil {
		return nil, Error(err)
	}
	return onePCResponse(commitTs), nil
}

func onePCResponse(commitTs uint64) *rpcpb.ResponseUnion {
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_CommitOnePc{CommitOnePc: &rpcpb.CommitOnePCResponse{CommitTs: commitTs}}}
}

// writeConflict maps the refresh of a written key to the write conflict
// the same state gives a PutIntent.
func writeConflict(err error) *rpcpb.Error {
	var rc *mvcc.ReadConflictError
	if !errors.As(err, &rc) {
		return Error(err)
	}
	e := rpcpb.NewError(rpcpb.ErrorCode_WRITE_CONFLICT, "%v", err)
	e.ExistingTs = rc.Ts
	if rc.Intent != nil {
		e.Intents = WireIntents([]mvcc.Intent{*rc.Intent})
	}
	return e
}
