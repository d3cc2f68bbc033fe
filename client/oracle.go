package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/tso"
)

// oracle hands out timestamps from the cluster's timestamp oracle,
// batching concurrent requests (tso.Batcher): at most one Timestamps RPC is
// in flight, and the next asks for as many timestamps as there are waiters
// (at most Options.TimestampBatchMax).
//
// The RPC goes to the leaseholder of the range holding keys.OracleBoundKey
// (range 1), through the sender, so NOT_LEASEHOLDER and the other routing
// errors are followed like any request's.
type oracle struct {
	s    *sender
	opts *Options
	// ctx bounds the RPCs; it ends when the DB closes. The RPC runs on
	// behalf of several callers, so no single caller's context may cancel
	// it; a caller whose context ends stops waiting and its timestamp is
	// simply not used.
	ctx     context.Context
	batcher *tso.Batcher
	// rpcs counts the Timestamps RPCs sent (for tests and stats).
	rpcs countingInt
}

func newOracle(ctx context.Context, s *sender, opts *Options) *oracle {
	o := &oracle{s: s, opts: opts, ctx: ctx}
	o.batcher = tso.NewBatcher(opts.TimestampBatchMax, o.fetch)
	return o
}

// timestamp returns a fresh timestamp.
func (o *oracle) timestamp(ctx context.Context) (uint64, error) {
	ts, err := o.batcher.Timestamp(ctx)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return 0, fmt.Errorf("%w: waiting for a timestamp: %w", ErrUnavailable, err)
	}
	return ts, err
}

// waitingCount is the number of callers waiting for the next RPC.
func (o *oracle) waitingCount() int { return o.batcher.Waiting() }

// fetch asks the oracle for n timestamps and returns the first.
func (o *oracle) fetch(n int) (uint64, error) {
	o.rpcs.add(1)
	ctx, cancel := context.WithTimeout(o.ctx, o.opts.RPCTimeout*2)
	defer cancel()
	var first uint64
	_, err := o.s.route(ctx, keys.OracleBoundKey, false, func(ctx context.Context, kv rpcpb.KVClient, _ *rpcpb.RangeDescriptor) (*rpcpb.Error, error) {
		// An oracle host that does not answer (stopped, cut off) is left
		// after LookupTimeout for range 1's other replicas, which redirect
		// to its new leaseholder once it has one: a Timestamps RPC may be
		// repeated (an unused timestamp costs nothing).
		actx, cancel := context.WithTimeout(ctx, o.opts.LookupTimeout)
		defer cancel()
		resp, err := kv.Timestamps(actx, &rpcpb.TimestampRequest{Count: uint32(n)})
		if err != nil {
			return nil, err
		}
		if pe := resp.GetError(); pe.GetCode() != rpcpb.ErrorCode_OK {
			return pe, nil
		}
		if resp.GetCount() != uint32(n) || resp.GetFirst() == 0 {
			return nil, &stopError{fmt.Errorf("%w: oracle returned %d timestamps from %d, asked for %d", ErrInternal, resp.GetCount(), resp.GetFirst(), n)}
		}
		first = resp.GetFirst()
		return nil, nil
	})
	if err != nil {
		return 0, fmt.Errorf("timestamp oracle: %w", err)
	}
	return first, nil
}
