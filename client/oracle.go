package client

import (
	"context"
	"fmt"
	"sync"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// oracle hands out timestamps from the cluster's timestamp oracle, batching
// concurrent requests: at most one Timestamps RPC is in flight; callers
// that arrive meanwhile wait, and the next RPC asks for as many timestamps
// as there are waiters (at most Options.TimestampBatchMax). Under load this
// turns N begin/commit timestamp requests into about N/depth RPCs, the
// batching the oracle's design relies on.
//
// Every timestamp a caller receives was allocated by an RPC sent after the
// caller asked, so it is greater than any timestamp handed out before the
// caller asked (the oracle's guarantee I4 carries over).
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
	ctx context.Context

	mu struct {
		sync.Mutex
		// waiting callers, in arrival order.
		waiting []chan tsResult
		// inFlight: a goroutine is running RPCs for waiting callers.
		// Invariant: len(waiting) > 0 implies inFlight.
		inFlight bool
	}
	// rpcs counts the Timestamps RPCs sent (for tests and stats).
	rpcs countingInt
}

type tsResult struct {
	ts  uint64
	err error
}

func newOracle(ctx context.Context, s *sender, opts *Options) *oracle {
	return &oracle{s: s, opts: opts, ctx: ctx}
}

// timestamp returns a fresh timestamp.
func (o *oracle) timestamp(ctx context.Context) (uint64, error) {
	ch := make(chan tsResult, 1)
	o.mu.Lock()
	o.mu.waiting = append(o.mu.waiting, ch)
	if !o.mu.inFlight {
		o.mu.inFlight = true
		go o.run()
	}
	o.mu.Unlock()
	select {
	case r := <-ch:
		return r.ts, r.err
	case <-ctx.Done():
		return 0, fmt.Errorf("%w: waiting for a timestamp: %w", ErrUnavailable, ctx.Err())
	}
}

// waitingCount is the number of callers waiting for the next RPC.
func (o *oracle) waitingCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.mu.waiting)
}

// run serves waiting callers until none is left.
func (o *oracle) run() {
	for {
		o.mu.Lock()
		n := min(len(o.mu.waiting), o.opts.TimestampBatchMax)
		if n == 0 {
			o.mu.inFlight = false
			o.mu.Unlock()
			return
		}
		batch := o.mu.waiting[:n:n]
		o.mu.waiting = append([]chan tsResult(nil), o.mu.waiting[n:]...)
		o.mu.Unlock()

		first, err := o.fetch(n)
		for i, ch := range batch {
			if err != nil {
				ch <- tsResult{err: err}
			} else {
				ch <- tsResult{ts: first + uint64(i)}
			}
		}
	}
}

// fetch asks the oracle for n timestamps and returns the first.
func (o *oracle) fetch(n int) (uint64, error) {
	o.rpcs.add(1)
	ctx, cancel := context.WithTimeout(o.ctx, o.opts.RPCTimeout*2)
	defer cancel()
	var first uint64
	_, err := o.s.route(ctx, keys.OracleBoundKey, false, func(ctx context.Context, kv rpcpb.KVClient, _ *rpcpb.RangeDescriptor) (*rpcpb.Error, error) {
		resp, err := kv.Timestamps(ctx, &rpcpb.TimestampRequest{Count: uint32(n)})
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
