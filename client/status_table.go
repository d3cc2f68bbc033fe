package client

import (
	"context"
	"fmt"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// Raw access to the transaction status table, for the status-table
// experiments (canopy bench status): the cells are written and read as the
// table's own records are, by put-unless-exists and plain reads, grouped
// per range by the sender. Keys are given without keys.StatusPrefix.
// Nothing else should write there: a cell at a transaction's status key is
// that transaction's decision.

// StatusTableKeysMax bounds the keys of one StatusTableRead or
// StatusTableWrite call (the server's batch limit).
const StatusTableKeysMax = keys.TxnKeysMax

// StatusTableRead reads the status-table cells ks in one call: one request
// per range they fall in, in parallel. values[i] is nil when ks[i] has no
// value (an empty value is returned as a non-nil empty slice).
func (db *DB) StatusTableRead(ctx context.Context, ks [][]byte) (values [][]byte, err error) {
	if len(ks) > StatusTableKeysMax {
		return nil, invalidArgf("StatusTableRead of %d keys is above StatusTableKeysMax=%d", len(ks), StatusTableKeysMax)
	}
	reqs := make([]*rpcpb.RequestUnion, len(ks))
	for i, k := range ks {
		reqs[i] = &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainGet{PlainGet: &rpcpb.PlainGetRequest{Key: keys.StatusKey(k)}}}
	}
	resps, err := db.sender.sendPoints(ctx, false, reqs)
	if err != nil {
		return nil, publicError(err)
	}
	values = make([][]byte, len(ks))
	for i, r := range resps {
		g := r.GetPlainGet()
		if g == nil {
			return nil, fmt.Errorf("%w: plain get answered with %T", ErrInternal, r.GetValue())
		}
		if g.GetFound() {
			values[i] = append([]byte{}, g.GetValue()...)
		}
	}
	return values, nil
}

// StatusTableWrite writes the cells ks[i] = vs[i] by put-unless-exists, in
// one call (one request per range). A cell that already has a value keeps
// it; the count of such cells is returned.
func (db *DB) StatusTableWrite(ctx context.Context, ks, vs [][]byte) (existed int, err error) {
	if len(ks) != len(vs) {
		return 0, invalidArgf("StatusTableWrite of %d keys and %d values", len(ks), len(vs))
	}
	if len(ks) > StatusTableKeysMax {
		return 0, invalidArgf("StatusTableWrite of %d keys is above StatusTableKeysMax=%d", len(ks), StatusTableKeysMax)
	}
	reqs := make([]*rpcpb.RequestUnion, len(ks))
	for i, k := range ks {
		reqs[i] = &rpcpb.RequestUnion{Value: &rpcpb.RequestUnion_PlainPutUnlessExists{PlainPutUnlessExists: &rpcpb.PlainPutUnlessExistsRequest{
			Key: keys.StatusKey(k), Value: vs[i]}}}
	}
	resps, err := db.sender.sendPoints(ctx, true, reqs)
	if err != nil {
		return 0, publicError(err)
	}
	for _, r := range resps {
		if !r.GetPlainPutUnlessExists().GetSucceeded() {
			existed++
		}
	}
	return existed, nil
}

// SplitStatusTable splits the status table into n ranges at
// keys.StatusSplitKeys(n) (n a power of two up to 256), beside the splits
// it already has; a split point that already starts a range is left as it
// is. For the hot-spot experiment: the tickets layout spreads consecutive
// transactions over these ranges.
func (db *DB) SplitStatusTable(ctx context.Context, n int) error {
	if n < 1 || n > 256 || n&(n-1) != 0 {
		return invalidArgf("SplitStatusTable(%d): want a power of two in [1, 256]", n)
	}
	for _, k := range keys.StatusSplitKeys(n) {
		e, err := db.sender.lookup(ctx, k)
		if err != nil {
			return publicError(err)
		}
		if string(e.desc.GetStartKey()) == string(k) {
			continue
		}
		_, err = db.sender.route(ctx, k, true, func(ctx context.Context, kv rpcpb.KVClient, _ *rpcpb.RangeDescriptor) (*rpcpb.Error, error) {
			resp, err := kv.Split(ctx, &rpcpb.SplitRequest{SplitKey: k})
			if err != nil {
				return nil, err
			}
			return resp.GetError(), nil
		})
		db.cache.evictKey(k)
		if err != nil {
			return publicError(err)
		}
	}
	return nil
}
