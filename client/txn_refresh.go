package client

import (
	"context"
	"sync"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// txnSpanRefresher is the layer that owns the read set (txn_layers.go).
// For a serializable transaction it records every key read (opGet, before
// the read is sent, so that the ReadSpansMax limit fails before anything
// is sent) and every span scanned (opScan, after the answer: a scan cut
// short by its limit read only up to its last key, so only that much needs
// checking). On the committer's opRefresh it fills in the read set and
// passes the request down, which checks every read for a change in
// (start_ts, commit_ts]; with nothing to check (no reads, or snapshot
// isolation, which records none) it answers at once without sending
// anything.
//
// Under the default protocol (writesFence) a key read and then written
// by the transaction is left out of the refresh: the write's PutIntent
// failed on any committed version of the key above start_ts, and from
// then on the transaction's intent kept every other writer off the key
// until the decision (another transaction removes it only after writing
// our status aborted, or recovering a STAGING record, so a commit cannot
// follow). So no version of such a key can fall in (start_ts, commit_ts]:
// the refresh could only succeed. A read-modify-write transaction thus
// commits without a refresh round. Not under 2pc-locking, whose Prepare
// takes its lock over a newer committed version.
type txnSpanRefresher struct {
	next         txnLayer
	serializable bool
	writesFence  bool
	readSpansMax int

	mu struct {
		sync.Mutex
		// reads are the keys (End empty) and spans read, logical keys.
		// Invariant: len(reads) <= readSpansMax.
		reads []*rpcpb.Span
		// readKeys dedupes point reads in reads.
		readKeys map[string]struct{}
		// written: the keys of the transaction's successful writes
		// (writesFence only).
		written map[string]struct{}
	}
}

// newSpanRefresher returns the layer over next; writesFence: a successful
// write fences its key against other writers until the decision (the
// default protocol's PutIntent), so a key read and written needs no
// refresh.
func newSpanRefresher(next txnLayer, serializable, writesFence bool, readSpansMax int) *txnSpanRefresher {
	r := &txnSpanRefresher{next: next, serializable: serializable, writesFence: writesFence, readSpansMax: readSpansMax}
	r.mu.readKeys = map[string]struct{}{}
	r.mu.written = map[string]struct{}{}
	return r
}

func (f *txnSpanRefresher) send(ctx context.Context, r *txnReq) (*txnResp, error) {
	switch r.op {
	case opGet:
		// A locking read (2pc-locking) holds its lock until the decision:
		// nothing to refresh.
		if !r.lock {
			if err := f.record(&rpcpb.Span{Start: r.key}); err != nil {
				return nil, err
			}
		}
	case opScan:
		resp, err := f.next.send(ctx, r)
		if err != nil {
			return nil, err
		}
		spanEnd := r.end
		if r.limit > 0 && len(resp.kvs) == r.limit {
			spanEnd = keys.Next(resp.kvs[len(resp.kvs)-1].GetKey())
		}
		if err := f.record(&rpcpb.Span{Start: r.key, End: spanEnd}); err != nil {
			return nil, err
		}
		return resp, nil
	case opOnePC:
		// The one-phase commit checks the reads in the same evaluation.
		f.mu.Lock()
		fr := *r
		fr.spans = append([]*rpcpb.Span(nil), f.mu.reads...)
		f.mu.Unlock()
		return f.next.send(ctx, &fr)
	case opWrite:
		resp, err := f.next.send(ctx, r)
		if err == nil && f.writesFence && f.serializable {
			f.mu.Lock()
			f.mu.written[string(r.key)] = struct{}{}
			f.mu.Unlock()
		}
		return resp, err
	case opRefresh:
		f.mu.Lock()
		spans := make([]*rpcpb.Span, 0, len(f.mu.reads))
		for _, sp := range f.mu.reads {
			if _, w := f.mu.written[string(sp.GetStart())]; w && len(sp.GetEnd()) == 0 {
				continue // fenced by our own write (see the type's comment)
			}
			spans = append(spans, sp)
		}
		f.mu.Unlock()
		if len(spans) == 0 {
			return &txnResp{}, nil
		}
		fr := *r
		fr.spans = spans
		return f.next.send(ctx, &fr)
	}
	return f.next.send(ctx, r)
}

// record adds a read key or span, enforcing readSpansMax.
func (f *txnSpanRefresher) record(sp *rpcpb.Span) error {
	if !f.serializable {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(sp.GetEnd()) == 0 {
		if _, ok := f.mu.readKeys[string(sp.GetStart())]; ok {
			return nil
		}
	}
	if len(f.mu.reads) >= f.readSpansMax {
		return invalidArgf("transaction reads more than ReadSpansMax=%d keys and spans", f.readSpansMax)
	}
	f.mu.reads = append(f.mu.reads, sp)
	if len(sp.GetEnd()) == 0 {
		f.mu.readKeys[string(sp.GetStart())] = struct{}{}
	}
	return nil
}
