package eval

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// Context is what evaluation knows besides the data.
type Context struct {
	// Desc is the range's descriptor under which the batch evaluates; every
	// key must lie in it (else RANGE_KEY_MISMATCH).
	Desc *rpcpb.RangeDescriptor
	// GCThreshold: reads at a timestamp below it are refused, because
	// versions they need may have been collected.
	GCThreshold uint64
	// WriteTs is the timestamp of the batch's non-transactional Puts,
	// taken by the leaseholder from the oracle after latching their keys;
	// 0 if the batch has none.
	WriteTs uint64
	// ScheduleTs, for a batch that puts a status encoding schedule version
	// (HasStatusScheduleWrite), is a timestamp the leaseholder took from
	// the oracle after latching: an era the version adds must begin above
	// it (txnstatus.CheckNext). 0 otherwise.
	ScheduleTs uint64
	// SharedLocks: the cluster runs 2pc-locking, so a non-transactional
	// Put waits for the replicated shared locks of its key (INTENT_FOUND
	// naming a holder; kvserver/twopc_path.go).
	SharedLocks bool
	// KeyStates, if not nil, knows of some keys that they have no intent,
	// and their newest version, so that a Put of one need not read it
	// (kvserver/keystates.go). The leaseholder sets it only for a batch of
	// non-transactional Puts alone, whose keys it has latched, and never
	// with SharedLocks.
	KeyStates KeyStates
}

// KeyStates is what a leaseholder knows, exactly, about keys a Put may
// write. Known is only asked under the key's write latch, so nothing
// changes the key in between; Note records what a Put wrote.
type KeyStates interface {
	// Known returns the newest committed version's timestamp of key (0:
	// none) and ok if the cache knows that key has no intent; and, either
	// way, the cache's generation, under which to Note what the Put
	// found.
	Known(key []byte) (newest mvcc.Timestamp, gen uint64, ok bool)
	// Note records that key has no intent and newest as its newest
	// version, as learned in generation gen.
	Note(key []byte, newest mvcc.Timestamp, gen uint64)
}

// Lock is a key where a transaction holds an intent.
type Lock struct {
	Key []byte
	// Txn is the transaction's start timestamp.
	Txn uint64
	// Strength: Exclusive for an intent (also when zero), Shared for
	// 2pc-locking's replicated shared lock of a key read.
	Strength concurrency.Strength
}

// Effects are the lock changes of a write batch, for the leaseholder's
// lock table once the batch's writes apply.
type Effects struct {
	// Locked lists the intents the batch writes.
	Locked []Lock
	// Unlocked lists the intents the batch resolves (or, resolving an intent
	// that is gone, confirms gone).
	Unlocked []Lock
}

// Command is one request type.
type Command struct {
	// Declare calls add for each span the request touches. Spans of a
	// scan are clamped to desc.
	Declare func(ru *rpcpb.RequestUnion, desc *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan))
	// EvalRead evaluates a read-only request on r. Nil for writes.
	EvalRead func(c Context, r storage.Reader, ru *rpcpb.RequestUnion) (*rpcpb.ResponseUnion, *rpcpb.Error)
	// EvalWrite evaluates a write on rw, recording lock changes in fx.
	// Nil for reads.
	EvalWrite func(c Context, rw storage.ReadWriter, ru *rpcpb.RequestUnion, fx *Effects) (*rpcpb.ResponseUnion, *rpcpb.Error)
}

// commands is the command table, indexed by method; each cmd_*.go file
// fills its entry.
var commands [rpcpb.MethodsMax]*Command

func register(m rpcpb.Method, c *Command) {
	if commands[m] != nil {
		panic(fmt.Sprintf("eval: %s registered twice", m))
	}
	if (c.EvalRead == nil) == (c.EvalWrite == nil) {
		panic(fmt.Sprintf("eval: %s must be exactly one of read or write", m))
	}
	commands[m] = c
}

// Lookup returns the command of a request, nil for an unknown request.
func Lookup(ru *rpcpb.RequestUnion) *Command {
	return commands[ru.Method()]
}

// Declare returns the spans that the batch's requests touch.
func Declare(req *rpcpb.BatchRequest, desc *rpcpb.RangeDescriptor) []concurrency.LatchSpan {
	spans := make([]concurrency.LatchSpan, 0, len(req.Requests))
	add := func(s concurrency.LatchSpan) { spans = append(spans, s) }
	for _, ru := range req.Requests {
		if c := Lookup(ru); c != nil {
			c.Declare(ru, desc, add)
		}
	}
	return spans
}

// EvalRead evaluates a batch of reads on r, a view current with the range's
// log. The first error is the batch's response.
func EvalRead(c Context, r storage.Reader, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
	resp := &rpcpb.BatchResponse{Responses: make([]*rpcpb.ResponseUnion, 0, len(req.Requests))}
	for _, ru := range req.Requests {
		cmd := Lookup(ru)
		if cmd == nil || cmd.EvalRead == nil {
			return &rpcpb.BatchResponse{Error: rpcpb.NewError(rpcpb.ErrorCode_INVALID_ARGUMENT, "request %s cannot be mixed with reads", ru.Method())}
		}
		out, e := cmd.EvalRead(c, r, ru)
		if e != nil {
			return &rpcpb.BatchResponse{Error: e}
		}
		resp.Responses = append(resp.Responses, out)
	}
	return resp
}

// EvalWrite evaluates a batch of writes into rw, an indexed batch over the
// leaseholder's state. On error the caller must discard rw: it may hold a
// part of the batch's writes.
func EvalWrite(c Context, rw storage.ReadWriter, req *rpcpb.BatchRequest) (*rpcpb.BatchResponse, Effects) {
	var fx Effects
	resp := &rpcpb.BatchResponse{Responses: make([]*rpcpb.ResponseUnion, 0, len(req.Requests))}
	for _, ru := range req.Requests {
		cmd := Lookup(ru)
		if cmd == nil || cmd.EvalWrite == nil {
			return &rpcpb.BatchResponse{Error: rpcpb.NewError(rpcpb.ErrorCode_INVALID_ARGUMENT, "request %s cannot be mixed with writes", ru.Method())}, Effects{}
		}
		out, e := cmd.EvalWrite(c, rw, ru, &fx)
		if e != nil {
			return &rpcpb.BatchResponse{Error: e}, Effects{}
		}
		resp.Responses = append(resp.Responses, out)
	}
	return resp, fx
}

// ContainsKey reports whether k lies in d.
func ContainsKey(d *rpcpb.RangeDescriptor, k []byte) bool {
	return d != nil && keys.Contains(d.StartKey, d.EndKey, k)
}

// ContainsSpan reports whether [start, end) lies in d (end empty: just start).
func ContainsSpan(d *rpcpb.RangeDescriptor, start, end []byte) bool {
	if !ContainsKey(d, start) {
		return false
	}
	return len(end) == 0 || bytes.Compare(end, d.EndKey) <= 0
}

// Mismatch is the error for a key outside the range: it carries the
// range's current descriptor so that the client can refresh its cache.
func Mismatch(desc *rpcpb.RangeDescriptor, key []byte) *rpcpb.Error {
	e := rpcpb.NewError(rpcpb.ErrorCode_RANGE_KEY_MISMATCH, "key %q is outside range r%d [%q, %q)", key, desc.GetRangeId(), desc.GetStartKey(), desc.GetEndKey())
	e.Range = desc
	return e
}

func belowGC(c Context, ts uint64) *rpcpb.Error {
	return rpcpb.NewError(rpcpb.ErrorCode_TS_BELOW_GC_THRESHOLD, "timestamp %d is below range r%d's GC threshold %d (versions older than the GC TTL are collected)", ts, c.Desc.GetRangeId(), c.GCThreshold)
}

func pointSpan(key []byte, a concurrency.Access) concurrency.LatchSpan {
	return concurrency.LatchSpan{Span: concurrency.Span{Key: key}, Access: a}
}

// spanOf is the latch span of [key, end); a span that is empty or
// inverted (evaluation refuses or ignores it) latches just key.
func spanOf(key, end []byte, a concurrency.Access) concurrency.LatchSpan {
	if bytes.Compare(end, key) <= 0 {
		end = nil
	}
	return concurrency.LatchSpan{Span: concurrency.Span{Key: key, EndKey: end}, Access: a}
}

// Error maps an evaluation error to a wire error. Errors that are not a
// known conflict are internal: evaluation of valid input does not fail.
func Error(err error) *rpcpb.Error {
	var wc *mvcc.WriteConflictError
	var ie *mvcc.IntentError
	var rc *mvcc.ReadConflictError
	switch {
	case errors.As(err, &wc):
		e := rpcpb.NewError(rpcpb.ErrorCode_WRITE_CONFLICT, "%v", err)
		e.ExistingTs = wc.ExistingTs
		if wc.Intent != nil {
			e.Intents = WireIntents([]mvcc.Intent{*wc.Intent})
		}
		return e
	case errors.As(err, &ie):
		e := rpcpb.NewError(rpcpb.ErrorCode_INTENT_FOUND, "%v", err)
		e.Intents = WireIntents(ie.Intents)
		return e
	case errors.As(err, &rc):
		e := rpcpb.NewError(rpcpb.ErrorCode_READ_CONFLICT, "%v", err)
		e.ExistingTs = rc.Ts
		if rc.Intent != nil {
			e.Intents = WireIntents([]mvcc.Intent{*rc.Intent})
		}
		return e
	case errors.Is(err, mvcc.ErrInvalidArgument):
		return rpcpb.NewError(rpcpb.ErrorCode_INVALID_ARGUMENT, "%v", err)
	}
	return rpcpb.NewError(rpcpb.ErrorCode_INTERNAL, "%v", err)
}

// WireIntents converts intents for the wire.
func WireIntents(in []mvcc.Intent) []*rpcpb.Intent {
	out := make([]*rpcpb.Intent, 0, len(in))
	for _, i := range in {
		out = append(out, &rpcpb.Intent{Key: i.Key, Txn: &rpcpb.TxnMeta{StartTs: i.Txn.StartTs, HeartbeatKey: i.Txn.HeartbeatKey}})
	}
	return out
}
