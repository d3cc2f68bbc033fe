package client

import (
	"context"
	"fmt"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// Single-key operations outside any transaction. Each is one request to
// one range (one Raft round for a write), linearizable:
//
//   - Get reads the latest value (GetRequest ts = 0) at the leaseholder,
//     which serves only reads current with its Raft log.
//   - Put and Delete write a committed version whose timestamp the
//     leaseholder takes from the oracle after latching the key.
//   - Scan reads at a fresh oracle timestamp, range after range; it is a
//     consistent snapshot at that timestamp.
//
// An intent of a transaction in the way is resolved like a transaction
// would (waiting up to Options.IntentWaitMax for a live one, then
// ErrRetryable). A Put or Delete whose outcome is unknown is resent within
// the call (a repeat inside the call window is still linearizable) until
// it succeeds or the attempts or ctx run out: then ErrAmbiguous.

// Get returns the latest value of key and whether it exists.
func (db *DB) Get(ctx context.Context, key []byte) ([]byte, bool, error) {
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	r, err := db.get(ctx, keys.UserKey(key), 0, 0, waiter{})
	if err != nil {
		return nil, false, publicError(err)
	}
	return r.GetValue(), r.GetFound(), nil
}

// get reads logical key k at ts for txnStart, resolving the intents it
// meets on behalf of w.
func (db *DB) get(ctx context.Context, k []byte, ts, txnStart uint64, w waiter) (*rpcpb.GetResponse, error) {
	req := &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Get{Get: &rpcpb.GetRequest{Key: k, Ts: ts, TxnStart: txnStart}}}
	for round := 0; ; round++ {
		resp, err := db.sender.sendOne(ctx, false, req)
		if pb, ok := asKVError(err, rpcpb.ErrorCode_INTENT_FOUND); ok && round < db.opts.IntentRoundsMax {
			if err := db.resolveForeign(ctx, pb.GetIntents(), w); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		g := resp.GetGet()
		if g == nil {
			return nil, fmt.Errorf("%w: get answered with %T", ErrInternal, resp.GetValue())
		}
		return g, nil
	}
}

// Put writes key = value.
func (db *DB) Put(ctx context.Context, key, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkValue(value); err != nil {
		return err
	}
	return db.put(ctx, keys.UserKey(key), value, false)
}

// Delete deletes key (writes a tombstone); deleting a missing key is not
// an error.
func (db *DB) Delete(ctx context.Context, key []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return db.put(ctx, keys.UserKey(key), nil, true)
}

func (db *DB) put(ctx context.Context, k, value []byte, del bool) error {
	req := &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Put{Put: &rpcpb.PutRequest{Key: k, Value: value, Delete: del}}}
	for round := 0; ; round++ {
		_, err := db.sender.sendOne(ctx, true, req)
		if pb, ok := asKVError(err, rpcpb.ErrorCode_INTENT_FOUND); ok && round < db.opts.IntentRoundsMax {
			if err := db.resolveForeign(ctx, pb.GetIntents(), waiter{}); err != nil {
				return publicError(err)
			}
			continue
		}
		return db.countAmbiguous(publicError(err))
	}
}

// Scan returns the keys in [start, end) in order, at most limit of them
// (0: all, up to Options.ScanKeysMax, beyond which it fails with
// ErrInvalidArgument). An empty end means the end of the keyspace.
func (db *DB) Scan(ctx context.Context, start, end []byte, limit int) ([]KeyValue, error) {
	ls, le, err := db.checkScan(start, end, limit)
	if err != nil {
		return nil, err
	}
	ts, err := db.oracle.timestamp(ctx)
	if err != nil {
		return nil, err
	}
	kvs, err := db.sender.scan(ctx, ls, le, ts, 0, limit, db.opts.ScanKeysMax, db.opts.IntentRoundsMax,
		func(ctx context.Context, intents []*rpcpb.Intent) error {
			return db.resolveForeign(ctx, intents, waiter{})
		})
	if err != nil {
		return nil, publicError(err)
	}
	return userKVs(kvs)
}
