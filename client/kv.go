package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
// ErrRetryable). A Put or Delete is retried only while no attempt can have
// applied; once one may have (see sendWriteOnce), it returns ErrAmbiguous.

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
	return db.getWith(ctx, &rpcpb.GetRequest{Key: k, Ts: ts, TxnStart: txnStart}, w)
}

// getWith sends g, resolving the intents it meets on behalf of w.
func (db *DB) getWith(ctx context.Context, g *rpcpb.GetRequest, w waiter) (*rpcpb.GetResponse, error) {
	req := &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_Get{Get: g}}
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
		err := db.sendWriteOnce(ctx, k, req)
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

// sendWriteOnce sends a non-transactional Put or Delete to the leaseholder
// of k's range, following redirects and retrying attempts that certainly
// did not apply (NOT_LEASEHOLDER, UNAVAILABLE, a connection that could not
// be dialled), but never an attempt that may have applied: that ends the
// call with ErrAmbiguous.
//
// Unlike the transaction's writes (intents, resolution, the status
// put-unless-exists), these writes are not idempotent: the leaseholder
// takes a fresh timestamp for each application, so a resend is a second
// write. If another client saw the first application and overwrote it,
// the resend would bring the old value back: one call whose effect appears
// on both sides of another write is not linearizable. (Found by
// testcluster's TestLinearizableSingleKeyOps: a Delete sent to a leaseholder
// that was then stopped applied once through the new leader and again when
// resent, after another client's Put.) The sender's general rule, "resend
// writes after an ambiguous attempt", is therefore overridden here.
func (db *DB) sendWriteOnce(ctx context.Context, k []byte, req *rpcpb.RequestUnion) error {
	_, err := db.sender.route(ctx, k, true, func(ctx context.Context, kv rpcpb.KVClient, d *rpcpb.RangeDescriptor) (*rpcpb.Error, error) {
		resp, err := kv.Batch(ctx, &rpcpb.BatchRequest{RangeId: d.GetRangeId(), Requests: []*rpcpb.RequestUnion{req}})
		if err != nil {
			if neverSent(err) || refused(err) {
				return nil, err // the router tries again, elsewhere if need be; or stops (refused)
			}
			return nil, &stopError{fmt.Errorf("%w: write of %q may have been applied and is not repeated: %w", ErrAmbiguous, k, err)}
		}
		pe := resp.GetError()
		switch {
		case pe.GetCode() == rpcpb.ErrorCode_AMBIGUOUS:
			return nil, &stopError{fmt.Errorf("%w: write of %q may have been applied and is not repeated: %s", ErrAmbiguous, k, pe.GetMessage())}
		case pe.GetCode() != rpcpb.ErrorCode_OK:
			return pe, nil
		case len(resp.GetResponses()) != 1 || resp.GetResponses()[0].GetPut() == nil:
			return nil, &stopError{fmt.Errorf("%w: put answered with %v", ErrInternal, resp.GetResponses())}
		}
		return nil, nil
	})
	return err
}

// refused reports whether a failed RPC was refused by the node's
// authorization check (ErrPermission, made a *stopError by the node
// directory's interceptor): it was not executed and must not be repeated.
func refused(err error) bool {
	var se *stopError
	return errors.As(err, &se) && errors.Is(se.err, ErrPermission)
}

// unstop returns the error a *stopError in err's chain carries, else err.
func unstop(err error) error {
	var se *stopError
	if errors.As(err, &se) {
		return se.err
	}
	return err
}

// neverSent reports whether a failed RPC certainly never reached the
// server: gRPC could not dial the node. (gRPC retries by itself the
// requests it started but never wrote to the wire.) Anything else, a
// connection lost mid-call or a deadline, may hide an applied write. A
// message that does not match only costs availability (ErrAmbiguous where
// a retry was possible), never correctness.
func neverSent(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "Error while dialing")
}
