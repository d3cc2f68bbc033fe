package client

import (
	"context"
	"fmt"

	"github.com/canopy-db/canopy/internal/commitprotocol"
)

// Protocol names a commit protocol (internal/commitprotocol states the
// contract every protocol keeps, on both sides). A cluster runs one,
// chosen at init; DB.Protocol says which.
type Protocol string

// The commit protocols.
const (
	// ProtocolDefault: DESIGN.md's protocol (reads at start_ts, intents,
	// refresh, put-unless-exists), with pipelining, parallel commits and
	// 1PC behind their switches.
	ProtocolDefault Protocol = Protocol(commitprotocol.Default)
	// Protocol2PCLocking: client-coordinated two-phase commit with strict
	// two-phase locking at the leaseholders (txn_twopc.go), the thesis's
	// baseline.
	Protocol2PCLocking Protocol = Protocol(commitprotocol.TwoPCLocking)
	// ProtocolHierarchyLocking, ProtocolHierarchyTimestamps: hierarchical
	// deferred validation (seed 004; txn_hierarchy.go).
	ProtocolHierarchyLocking    Protocol = Protocol(commitprotocol.HierarchyLocking)
	ProtocolHierarchyTimestamps Protocol = Protocol(commitprotocol.HierarchyTimestamps)
)

// ProtocolError is returned when a transaction's protocol cannot be used:
// the cluster runs another protocol and refuses the request (the server's
// PROTOCOL_NOT_RUN), or this client has no implementation of it. It wraps
// ErrInvalidArgument: never retried, since it would fail again.
type ProtocolError struct {
	// Protocol is the transaction's protocol; Msg says why it was refused.
	Protocol Protocol
	Msg      string
}

func (e *ProtocolError) Error() string {
	if e.Protocol != "" {
		return fmt.Sprintf("canopy: commit protocol %s: %s", e.Protocol, e.Msg)
	}
	return "canopy: commit protocol: " + e.Msg
}

// Is makes errors.Is(err, ErrInvalidArgument) true.
func (e *ProtocolError) Is(target error) bool { return target == ErrInvalidArgument }

// WithProtocol runs the transaction with protocol p instead of the
// cluster's. The cluster decides whether that is safe
// (commitprotocol, contract 3): today a cluster of either built protocol
// admits the snapshot reads of a ProtocolDefault read-only transaction,
// and refuses every other request of a protocol it does not run.
func WithProtocol(p Protocol) TxnOption { return func(o *TxnOptions) { o.Protocol = p } }

// Protocol returns the cluster's commit protocol, as read at Open.
func (db *DB) Protocol() Protocol {
	return Protocol(commitprotocol.Of(db.settings.GetCommitProtocol()))
}

// commitProtocol is the client side of a commit protocol: it builds a
// transaction's coordinator, the stack of layers below Txn
// (txn_layers.go). Txn keeps, whatever the protocol, the transaction's
// state, its write set and its lock set, the poison error, and the
// aftermath of the decision: intents and locks of every key in those sets
// are resolved by the intent resolver (intent_resolver.go) once the
// decision is known, and a decided transaction's status is cached.
//
// The stack must:
//
//  1. answer opGet and opScan (reads, seeing the transaction's own
//     writes), opWrite (buffer or send), opCommit (decide: the commit point
//     is put-unless-exists in the status table, txnResp.ts the commit_ts)
//     and opAbort (write ABORTED with put-unless-exists unless nothing
//     could be in the cluster; txnResp.d the decision that holds);
//  2. return a heartbeater on top (newHeartbeater), started before the
//     first intent or lock reaches the cluster, so that readers can tell
//     a live transaction from an abandoned one;
//  3. send every request with ctxWithProtocol(ctx, its protocol), which
//     puts the protocol in each BatchRequest (the server refuses requests
//     of protocols its cluster does not run);
//  4. call Txn.addLock for every key at which a request may leave a lock
//     (beyond the write set) before that request is sent, so the lock is
//     released after the decision.
type commitProtocol interface {
	// stack returns the top layer of t's coordinator and its heartbeater.
	stack(t *Txn) (txnLayer, *txnHeartbeater)
}

// clientProtocols maps every protocol to its client side; nil marks a slot
// not built yet.
var clientProtocols = map[Protocol]commitProtocol{
	ProtocolDefault:             defaultProtocol{},
	Protocol2PCLocking:          twoPCProtocol{},
	ProtocolHierarchyLocking:    hierarchyProtocol{}, // txn_hierarchy.go
	ProtocolHierarchyTimestamps: hierarchyProtocol{},
}

// protocolFor returns the implementation of p, or a *ProtocolError.
func protocolFor(p Protocol) (commitProtocol, error) {
	impl, ok := clientProtocols[p]
	if !ok {
		return nil, &ProtocolError{Protocol: p, Msg: fmt.Sprintf("unknown; want one of %v", commitprotocol.Names())}
	}
	if impl == nil {
		return nil, &ProtocolError{Protocol: p, Msg: "not built yet in this client"}
	}
	return impl, nil
}

type protocolKey struct{}

// ctxWithProtocol returns ctx carrying the protocol that the sender puts
// in every BatchRequest sent under it (BatchRequest.protocol).
func ctxWithProtocol(ctx context.Context, p Protocol) context.Context {
	return context.WithValue(ctx, protocolKey{}, p)
}

// protocolOf returns the protocol ctx carries ("" = none: the request is
// sent as the default protocol's, or as no transaction's).
func protocolOf(ctx context.Context) string {
	p, _ := ctx.Value(protocolKey{}).(Protocol)
	if p == ProtocolDefault {
		return ""
	}
	return string(p)
}

// defaultProtocol builds DESIGN.md's coordinator, bottom up in the order
// txn_layers.go gives.
type defaultProtocol struct{}

func (defaultProtocol) stack(t *Txn) (txnLayer, *txnHeartbeater) {
	db := t.db
	var l txnLayer = &txnWire{t: t}
	l = newSpanRefresher(l, t.opts.Isolation == Serializable, true, db.opts.ReadSpansMax)
	l = &txnCommitter{next: l, startTs: t.startTs, abortTimeout: db.opts.AbortTimeout, logger: db.opts.Logger, stats: &db.stats,
		stepHook: db.opts.TestingCommitStep}
	pipelining, parallelCommits, onePC := db.txnSwitches(t.opts)
	t.onePC = onePC
	pl := newPipeliner(l, pipelining, int64(db.opts.PipelinedBytesMax), &db.stats)
	pl.parallelCommits = parallelCommits
	l = pl
	l = &txnSeqNumAllocator{next: l}
	hb := t.newHeartbeater(l)
	return hb, hb
}
