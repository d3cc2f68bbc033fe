package etcdapi

import (
	"bytes"
	"context"

	"github.com/canopy-db/canopy/client"
)

// Writes are buffered in the txnExec and handed to the commit
// (client.Txn.CommitWith), so that a request whose keys fall in one range
// (the etcd keyspace is one range until it grows) commits in one Raft
// proposal: Canopy's one-phase commit. A transactional Put would instead
// write an intent at once, to be proven and resolved later (three
// consensus rounds where one does). A read that overlaps a buffered write
// first sends the buffer as ordinary writes (the transaction then commits
// the ordinary way): reads always see the request's own writes.
//
// Invariant: flushed implies buffered is empty after every call returns.

func (x *txnExec) overlapsBuffer(start, end []byte) bool {
	for _, w := range x.buffered {
		if bytes.Compare(w.Key, start) >= 0 && (len(end) == 0 || bytes.Compare(w.Key, end) < 0) {
			return true
		}
	}
	return false
}

// flush sends the buffered writes to the transaction.
func (x *txnExec) flush(ctx context.Context) error {
	x.flushed = true
	ws := x.buffered
	x.buffered = nil
	for _, w := range ws {
		var err error
		if w.Delete {
			err = x.txn.Delete(ctx, w.Key)
		} else {
			err = x.txn.Put(ctx, w.Key, w.Value)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (x *txnExec) bufPut(ctx context.Context, k, v []byte) error {
	if x.flushed {
		return x.txn.Put(ctx, k, v)
	}
	x.buffered = append(x.buffered, client.Write{Key: bytes.Clone(k), Value: v})
	return nil
}

func (x *txnExec) bufDelete(ctx context.Context, k []byte) error {
	if x.flushed {
		return x.txn.Delete(ctx, k)
	}
	x.buffered = append(x.buffered, client.Write{Key: bytes.Clone(k), Delete: true})
	return nil
}

func (x *txnExec) bufGet(ctx context.Context, k []byte) ([]byte, bool, error) {
	if x.overlapsBuffer(k, append(bytes.Clone(k), 0)) {
		if err := x.flush(ctx); err != nil {
			return nil, false, err
		}
	}
	return x.txn.Get(ctx, k)
}

func (x *txnExec) bufScan(ctx context.Context, start, end []byte, limit int) ([]client.KeyValue, error) {
	if x.overlapsBuffer(start, end) {
		if err := x.flush(ctx); err != nil {
			return nil, err
		}
	}
	return x.txn.Scan(ctx, start, end, limit)
}

// finish ends fn's work: the buffered writes go with the commit.
func (x *txnExec) finish(ctx context.Context) error {
	if x.flushed || len(x.buffered) == 0 {
		return x.flush(ctx)
	}
	ws := x.buffered
	x.buffered = nil
	return x.txn.CommitWith(ctx, ws...)
}
