package client

import (
	"context"
	"sync/atomic"
)

// txnSeqNumAllocator is the layer that numbers a transaction's writes
// (txn_layers.go): each opWrite gets seq 1, 2, ... in the order the writes
// enter the layer. The pipeliner needs the numbers when two writes of one
// key are in flight at once (operations of one transaction on several
// goroutines, whose answers may come back in either order): the write
// issued last is the one to prove. Everything else passes through.
//
// CockroachDB's allocator also stamps reads, so that a read sees the
// transaction's writes up to its own number (savepoints, a statement not
// seeing its own writes). Canopy has neither, and an intent holds one
// value, so reads go unnumbered.
type txnSeqNumAllocator struct {
	next txnLayer
	// seq is the number of the last write numbered.
	seq atomic.Uint64
}

func (s *txnSeqNumAllocator) send(ctx context.Context, r *txnReq) (*txnResp, error) {
	if r.op == opWrite {
		w := *r
		w.seq = s.seq.Add(1)
		r = &w
	}
	return s.next.send(ctx, r)
}
