package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// A transaction of the hierarchy protocols (issue 9; seed 004, 3.2; the
// nodes' side is internal/kvserver's hierarchy*.go), used when the
// cluster's settings carry a validator tree:
//
//   - Begin takes start_ts from the oracle as for the default protocol:
//     it is the transaction's snapshot (the thesis takes the version of
//     the first read; docs/design-notes.md says why Canopy does not).
//   - Reads are served at start_ts by the key's leaseholder (a read that
//     meets an intent waits for its decision, as in the default
//     protocol); a key read again, or written by the transaction, is
//     served from the transaction's cache. A read never aborts.
//   - Writes are buffered here until Commit: nothing reaches the cluster
//     before.
//   - Commit groups the read and written keys by the node leading their
//     range, and sends each node its part (Hierarchy.Commit) in parallel.
//     The lowest node's part answers with the decision; the others answer
//     once taken. A part refused before it was taken (the node does not
//     lead a key's range any more) means the transaction cannot commit:
//     it is recorded ABORTED (put-unless-exists; if a decision exists it
//     stands) and retried.
//   - A read-only transaction commits without any message.
//
// Commit timestamps are the validators' (a leaf's smallest timestamp above
// its clock and the snapshot), which may run a little ahead of the
// oracle: a client's next transaction begins above its last commit
// timestamp (it reads its own writes), but a transaction of another client
// that begins right after may not see a commit acknowledged a moment
// before (serializable, not strictly serializable: the thesis's protocol
// gives no real-time order either).
//
// Scan is allowed only in read-only hierarchy transactions: validators
// check keys, not spans, so a scan's phantoms would go unchecked; a
// transaction that scanned and wrote is refused at Commit
// (ErrInvalidArgument).
type hierTxn struct {
	mu sync.Mutex
	// writes are the buffered writes by logical key; order keeps first-write
	// order.
	writes map[string]*rpcpb.HierWrite
	order  []string
	// reads are the values read (the cache), by logical key.
	reads   map[string]hierRead
	scanned bool
}

// hierBeginRoundsMax bounds the oracle rounds a Begin spends waiting for
// the oracle to pass the client's last hierarchy commit timestamp.
const hierBeginRoundsMax = 1000

type hierRead struct {
	value []byte
	found bool
}

// isHierarchy reports whether p is a hierarchy protocol.
func isHierarchy(p Protocol) bool {
	return p == ProtocolHierarchyLocking || p == ProtocolHierarchyTimestamps
}

// hierarchyProtocol is the hierarchy protocols' slot in clientProtocols.
// Txn sends a hierarchy transaction's reads, writes and commit to the
// functions of this file (t.hier) rather than down a stack of layers: its
// writes are buffered here, nothing is pipelined, refreshed or
// heartbeated, and its intents are written and resolved by the nodes. The
// stack is the wire alone, for the abort of a transaction that sent
// nothing, under the heartbeater Txn expects (never started: no write
// goes down).
type hierarchyProtocol struct{}

func (hierarchyProtocol) stack(t *Txn) (txnLayer, *txnHeartbeater) {
	hb := t.newHeartbeater(&txnWire{t: t})
	return hb, hb
}

func newHierTxn() *hierTxn {
	return &hierTxn{writes: map[string]*rpcpb.HierWrite{}, reads: map[string]hierRead{}}
}

func (t *Txn) hierGet(ctx context.Context, k []byte) ([]byte, bool, error) {
	h := t.hier
	h.mu.Lock()
	if w, ok := h.writes[string(k)]; ok {
		h.mu.Unlock()
		if w.Delete {
			return nil, false, nil
		}
		return slices.Clone(w.Value), true, nil
	}
	if r, ok := h.reads[string(k)]; ok {
		h.mu.Unlock()
		return slices.Clone(r.value), r.found, nil
	}
	h.mu.Unlock()
	g, err := t.db.get(ctxWithProtocol(ctx, t.protocol), k, t.startTs, t.startTs, waiter{startTs: t.startTs})
	if err != nil {
		return nil, false, t.fail(err)
	}
	h.mu.Lock()
	if r, ok := h.reads[string(k)]; ok {
		// A concurrent Get of the same key got there first: one value.
		h.mu.Unlock()
		return slices.Clone(r.value), r.found, nil
	}
	h.reads[string(k)] = hierRead{value: g.GetValue(), found: g.GetFound()}
	h.mu.Unlock()
	return g.GetValue(), g.GetFound(), nil
}

func (t *Txn) hierScan(ctx context.Context, start, end []byte, limit int) ([]KeyValue, error) {
	h := t.hier
	h.mu.Lock()
	wrote := len(h.order) > 0
	h.scanned = true
	h.mu.Unlock()
	if wrote {
		return nil, invalidArgf("transaction %d: a hierarchy transaction may scan only while it has written nothing (validators check keys, not spans)", t.startTs)
	}
	r, err := (&txnWire{t: t}).send(ctxWithProtocol(ctx, t.protocol), &txnReq{op: opScan, key: start, end: end, limit: limit})
	if err != nil {
		return nil, t.fail(err)
	}
	return userKVs(r.kvs)
}

func (t *Txn) hierWrite(k, value []byte, del bool) error {
	h := t.hier
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.scanned {
		return invalidArgf("transaction %d: a hierarchy transaction that scanned may not write (validators check keys, not spans)", t.startTs)
	}
	if _, ok := h.writes[string(k)]; !ok {
		if len(h.order) >= t.db.opts.TxnKeysMax {
			return invalidArgf("transaction writes %d keys, above the limit TxnKeysMax=%d", len(h.order)+1, t.db.opts.TxnKeysMax)
		}
		h.order = append(h.order, string(k))
	}
	h.writes[string(k)] = &rpcpb.HierWrite{Key: slices.Clone(k), Value: slices.Clone(value), Delete: del}
	return nil
}

// hierCommit is Commit for the hierarchy protocols.
func (t *Txn) hierCommit(ctx context.Context) error {
	poisoned, err := t.startCommit()
	if err != nil {
		return err
	}
	h := t.hier
	h.mu.Lock()
	var writes []*rpcpb.HierWrite
	for _, k := range h.order {
		writes = append(writes, h.writes[k])
	}
	var reads [][]byte
	for k := range h.reads {
		reads = append(reads, []byte(k))
	}
	h.mu.Unlock()
	if poisoned != nil {
		t.finish(ctx, decision{})
		return poisoned
	}
	if len(writes) == 0 {
		// Read-only: its reads were a snapshot at start_ts.
		t.finish(ctx, decision{commitTs: t.startTs})
		return nil
	}
	parts, nodes, err := t.db.hierParts(ctx, t.startTs, reads, writes)
	if err != nil {
		t.finish(ctx, decision{})
		return publicError(err)
	}
	t.mu.Lock()
	t.mu.hierSent = true
	t.mu.Unlock()
	d, err := t.db.hierSend(ctx, t.startTs, parts, nodes)
	switch {
	case err == nil:
	case errors.Is(err, ErrAmbiguous):
		t.setState(txnUnknown)
		t.db.stats.ambiguous.add(1)
		return err
	default:
		return err
	}
	t.finish(ctx, d)
	if !d.aborted() {
		for {
			cur := t.db.hierCommitted.Load()
			if d.commitTs <= cur || t.db.hierCommitted.CompareAndSwap(cur, d.commitTs) {
				break
			}
		}
	}
	if d.aborted() {
		return &RetryableError{Reason: ReasonAborted, Msg: fmt.Sprintf("transaction %d aborted by its validator (a conflict at some node)", t.startTs)}
	}
	return nil
}

// hierParts groups a transaction's keys into parts by the node believed
// to lead their range.
func (db *DB) hierParts(ctx context.Context, startTs uint64, reads [][]byte, writes []*rpcpb.HierWrite) (map[uint64]*rpcpb.HierCommitRequest, []uint64, error) {
	parts := map[uint64]*rpcpb.HierCommitRequest{}
	part := func(k []byte) (*rpcpb.HierCommitRequest, error) {
		e, err := db.sender.lookup(ctx, k)
		if err != nil {
			return nil, err
		}
		nd := db.cache.leaseholder(e.desc.GetRangeId())
		if nd == 0 && len(e.desc.GetReplicas()) > 0 {
			nd = e.desc.GetReplicas()[0].GetNodeId()
		}
		p := parts[nd]
		if p == nil {
			p = &rpcpb.HierCommitRequest{StartTs: startTs}
			parts[nd] = p
		}
		return p, nil
	}
	for _, w := range writes {
		p, err := part(w.Key)
		if err != nil {
			return nil, nil, err
		}
		p.Writes = append(p.Writes, w)
	}
	sort.Slice(reads, func(i, j int) bool { return bytes.Compare(reads[i], reads[j]) < 0 })
	for _, k := range reads {
		p, err := part(k)
		if err != nil {
			return nil, nil, err
		}
		p.Reads = append(p.Reads, k)
	}
	nodes := make([]uint64, 0, len(parts))
	for nd := range parts {
		nodes = append(nodes, nd)
	}
	slices.Sort(nodes)
	for _, p := range parts {
		p.Nodes = nodes
	}
	return parts, nodes, nil
}

// hierSend sends the parts and returns the decision: the lowest node's
// answer, or, when a part was refused, the decision recorded by aborting
// the transaction in the status table (an error that is retryable).
func (db *DB) hierSend(ctx context.Context, startTs uint64, parts map[uint64]*rpcpb.HierCommitRequest, nodes []uint64) (decision, error) {
	type result struct {
		node uint64
		resp *rpcpb.HierCommitResponse
		err  error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan result, len(nodes))
	for _, nd := range nodes {
		go func() {
			resp, err := db.hierCall(ctx, nd, parts[nd])
			results <- result{nd, resp, err}
		}()
	}
	for range nodes {
		r := <-results
		if r.err == nil && r.resp.GetError() != nil {
			pe := r.resp.GetError()
			if pe.GetCode() == rpcpb.ErrorCode_NOT_LEASEHOLDER {
				db.noteLeaseholders(parts[r.node], pe.GetLeaseholderHint())
			}
			r.err = &kvError{pb: pe}
		}
		if r.err == nil {
			if r.node == nodes[0] {
				if !r.resp.GetDecided() {
					return decision{}, fmt.Errorf("%w: node n%d answered without a decision", ErrInternal, r.node)
				}
				if r.resp.GetCommitted() {
					return decision{commitTs: r.resp.GetCommitTs()}, nil
				}
				return decision{commitTs: txnstatus.Aborted}, nil
			}
			continue
		}
		// A part failed: the transaction cannot commit unless it already
		// did (an ambiguous answer). The status table says which.
		pub := publicError(r.err)
		d, err := db.abortTxn(context.WithoutCancel(ctx), startTs)
		if err != nil {
			return decision{}, fmt.Errorf("%w: part at node n%d failed (%w) and the abort could not be recorded: %w", ErrAmbiguous, r.node, pub, err)
		}
		if !d.aborted() {
			return d, nil
		}
		if errors.Is(pub, ErrInvalidArgument) {
			return d, pub
		}
		return d, &RetryableError{Reason: ReasonAborted, Msg: fmt.Sprintf("transaction %d: part at node n%d not taken: %v", startTs, r.node, pub)}
	}
	return decision{}, fmt.Errorf("%w: no answer from node n%d", ErrInternal, nodes[0])
}

// noteLeaseholders corrects the leaseholder hints of a refused part's
// ranges.
func (db *DB) noteLeaseholders(p *rpcpb.HierCommitRequest, hint uint64) {
	ks := append([][]byte(nil), p.GetReads()...)
	for _, w := range p.GetWrites() {
		ks = append(ks, w.GetKey())
	}
	for _, k := range ks {
		if e := db.cache.lookup(k); e != nil {
			db.cache.setLeaseholder(e.desc.GetRangeId(), hint)
		}
	}
}

// hierCall sends one part to node nd.
func (db *DB) hierCall(ctx context.Context, nd uint64, p *rpcpb.HierCommitRequest) (*rpcpb.HierCommitResponse, error) {
	addr, ok := db.nodes.address(nd)
	if !ok {
		return nil, fmt.Errorf("%w: address of node n%d unknown", ErrUnavailable, nd)
	}
	c, err := db.nodes.hierarchyClient(addr)
	if err != nil {
		return nil, err
	}
	resp, err := c.Commit(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("%w: commit part at node n%d: %w", ErrAmbiguous, nd, err)
	}
	return resp, nil
}
