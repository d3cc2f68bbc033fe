package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// sender routes requests to the leaseholders of ranges and retries what the
// routing layer can retry on its own:
//
//   - NOT_LEASEHOLDER: remember the hint (and its address) and resend there;
//     without a hint, try the next replica.
//   - RANGE_NOT_FOUND, RANGE_KEY_MISMATCH: evict the cached descriptor (take
//     the one the error carries, if any), look the range up again, resend.
//   - UNAVAILABLE, NOT_BOOTSTRAPPED, a transport error: back off, try
//     another replica.
//   - AMBIGUOUS, or a transport error on a write: the write may have been
//     applied. The writes sent through here are safe to repeat (PutIntent,
//     ResolveIntent and the plain writes are idempotent; PlainPutUnlessExists
//     is repeated and an "exists" with our own value counts as success, see
//     putUnlessExists), so the sender resends, and only if it runs out of
//     attempts or time does it return ErrAmbiguous instead of
//     ErrUnavailable. The non-transactional Put and Delete are not safe to
//     repeat (each application takes a fresh timestamp): they never resend
//     after such an attempt (DB.sendWriteOnce).
//
// Everything else (conflicts, intents, invalid arguments) is returned to
// the caller: conflicts and intents as *kvError for the coordinator.
// Every loop is bounded by the context and Options.SendAttemptsMax.
type sender struct {
	opts  *Options
	nodes *nodeDirectory
	cache *rangeCache
	// cursor rotates "any node" requests so that a node that failed is not
	// asked first again.
	cursor atomic.Int64
	// ctx ends when the DB closes (the suspects' probes).
	ctx context.Context
	// suspects are the nodes found silent (probe.go), until one of their
	// probes is answered.
	suspects suspectSet
	// timing: the probe timeout and routing backoff, derived from the
	// cluster's election timeout (timing.go).
	timing *timing
}

// backoff returns a fresh routing backoff (timing.go).
func (s *sender) backoff() backoff {
	return newBackoff(s.opts.SendBackoffInitial, s.timing.sendBackoffMax())
}

// stopError wraps an error that ends a routing loop at once.
type stopError struct{ err error }

func (e *stopError) Error() string { return e.err.Error() }

// rangeCall sends one attempt to one node for range desc. It returns the
// server's error (nil or OK: success) or a transport error; a *stopError
// ends the loop with the wrapped error.
type rangeCall func(ctx context.Context, kv rpcpb.KVClient, desc *rpcpb.RangeDescriptor) (*rpcpb.Error, error)

// giveUp builds the error of a routing loop that ran out of attempts or
// time. lastErr may be a context error; errors.Is sees through both.
func giveUp(ambiguous bool, what string, lastErr error) error {
	if lastErr == nil {
		lastErr = errors.New("no attempt made")
	}
	if ambiguous {
		return fmt.Errorf("%w: %s: a write may have been applied: %w", ErrAmbiguous, what, lastErr)
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, lastErr)
}

// route sends call to the leaseholder of the range containing routeKey,
// following redirects and refreshing descriptors. write marks calls that
// change state (for ambiguity). It returns the descriptor the successful
// attempt used.
func (s *sender) route(ctx context.Context, routeKey []byte, write bool, call rangeCall) (*rpcpb.RangeDescriptor, error) {
	bo := s.backoff()
	var (
		ambiguous bool
		lastErr   error
		wait      bool
		lastHint  uint64
		// unreachable: nodes whose attempt failed in transport (stopped,
		// cut off) during this call; the next attempts try the range's
		// other replicas first. silent: those of them whose attempt ran
		// out of time (no answer at all), as opposed to an error answer.
		unreachable, silent map[uint64]bool
	)
	for attempt := 0; attempt < s.timing.sendAttempts(); attempt++ {
		if wait {
			if err := sleepCtx(ctx, bo.next()); err != nil {
				lastErr = err
				break
			}
		}
		wait = true
		if err := ctx.Err(); err != nil {
			lastErr = err
			break
		}
		e, err := s.lookup(ctx, routeKey)
		if err != nil {
			if ambiguous {
				return nil, giveUp(true, fmt.Sprintf("range of %q", routeKey), err)
			}
			return nil, err
		}
		rid := e.desc.GetRangeId()
		nodeID, addr := s.target(e, attempt, unreachable)
		if addr == "" {
			lastErr = fmt.Errorf("no address known for range %d", rid)
			continue
		}
		kv, err := s.nodes.client(addr)
		if err != nil {
			return nil, err
		}
		actx, cancel := context.WithTimeout(ctx, s.opts.RPCTimeout)
		if lh := s.cache.leaseholder(rid); lh != 0 && lh != nodeID && (unreachable[lh] || s.suspects.has(lh)) {
			// The leaseholder is out of our reach: ask this replica to
			// forward the batch to it (kvserver/proxy.go), in case only
			// our path to it is cut.
			actx = metadata.AppendToOutgoingContext(actx, proxyHeader, "1")
		}
		var nodeSilent atomic.Bool
		stopProbe := s.probe(actx, cancel, nodeID, addr, &nodeSilent) // probe.go
		pbErr, err := call(actx, kv, e.desc)
		stopProbe()
		cancel()
		var se *stopError
		if nodeSilent.Load() && ctx.Err() == nil {
			// The probe cancelled the attempt. A transport error is that
			// cancellation: the node gave no answer. But an answer (the
			// probe raced with it) stands, and so does a call's own verdict
			// (*stopError): a call that routes with write=false and
			// reports ambiguity itself (the one-phase commit, the
			// non-transactional Put) said so of this very cancellation;
			// replacing its ErrAmbiguous with a plain transport error made
			// the loop resend a one-phase commit that may have applied and
			// give up with ErrUnavailable (a commit reported as failed:
			// G1a in TestListAppendSwitches/all-on).
			if nodeID != 0 {
				s.suspect(nodeID, addr) // probe.go
			}
			if err != nil && !errors.As(err, &se) {
				pbErr, err = nil, fmt.Errorf("%w within %v: %w", errNodeSilent, s.timing.probe(), context.DeadlineExceeded)
			}
		}
		if errors.As(err, &se) {
			if ambiguous && errors.Is(se.err, errRegroup) {
				// The caller regroups and resends; it must know that an
				// earlier attempt may have applied the write.
				return e.desc, errRegroupMayHaveApplied
			}
			return e.desc, se.err
		}
		if err != nil {
			// Transport error: the request may have reached the node and
			// been proposed, unless the node refused it as coming from
			// another cluster.
			if write && !rpcpb.IsClusterMismatch(err) {
				ambiguous = true
			}
			lastErr = fmt.Errorf("node %d at %s: %w", nodeID, addr, err)
			s.cache.clearLeaseholder(rid, nodeID)
			if unreachable == nil {
				unreachable, silent = map[uint64]bool{}, map[uint64]bool{}
			}
			unreachable[nodeID] = true
			if isTimeout(err) {
				silent[nodeID] = true
				if nodeID != 0 {
					s.suspect(nodeID, addr) // probe.go
				}
			}
			continue
		}
		if pbErr.GetCode() == rpcpb.ErrorCode_OK {
			return e.desc, nil
		}
		lastErr = fmt.Errorf("range %d at node %d (%s): %s: %s", rid, nodeID, addr, pbErr.GetCode(), pbErr.GetMessage())
		switch pbErr.GetCode() {
		case rpcpb.ErrorCode_NOT_LEASEHOLDER:
			hint := pbErr.GetLeaseholderHint()
			s.nodes.set(hint, pbErr.GetLeaseholderAddress())
			if hint != 0 && hint != nodeID {
				if unreachable[hint] && !silent[hint] {
					// The replicas name as leaseholder a node whose attempt
					// failed with an error answer (a reply lost, a
					// connection reset), not silence: it is up, and
					// only it can serve the range. Without this the call
					// went round the other replicas, each naming it,
					// until it ran out of attempts (the stalls after a
					// lost commit reply in docs/RELIABILITY.md).
					delete(unreachable, hint)
					lastHint = hint // back off before going back to it
				}
				s.cache.setLeaseholder(rid, hint)
				// Follow a new hint at once; a hint we already followed
				// means the lease is moving, so back off.
				wait = hint == lastHint
				lastHint = hint
			} else {
				s.cache.clearLeaseholder(rid, nodeID)
			}
		case rpcpb.ErrorCode_RANGE_NOT_FOUND:
			s.cache.evict(e)
			s.cache.clearLeaseholder(rid, nodeID)
		case rpcpb.ErrorCode_RANGE_KEY_MISMATCH:
			s.cache.evict(e)
			if r := pbErr.GetRange(); r != nil {
				s.cache.insert(r, 0)
			}
			wait = attempt > 0
		case rpcpb.ErrorCode_UNAVAILABLE, rpcpb.ErrorCode_NOT_BOOTSTRAPPED:
			if rpcpb.IsOutOfDisk(pbErr) {
				// Final for this attempt loop: the leaseholder stays out of
				// disk until an operator frees space (ErrOutOfDisk). An
				// earlier attempt may have applied the write, though.
				if ambiguous {
					return e.desc, giveUp(true, "write refused for lack of disk after an attempt with an unknown outcome", errorFromPB(pbErr))
				}
				return e.desc, errorFromPB(pbErr)
			}
			s.cache.clearLeaseholder(rid, nodeID)
		case rpcpb.ErrorCode_AMBIGUOUS:
			if write {
				ambiguous = true
			}
		case rpcpb.ErrorCode_WRITE_CONFLICT, rpcpb.ErrorCode_INTENT_FOUND, rpcpb.ErrorCode_READ_CONFLICT:
			return e.desc, &kvError{pb: pbErr}
		default:
			return e.desc, errorFromPB(pbErr)
		}
	}
	return nil, giveUp(ambiguous, fmt.Sprintf("request for key %q", routeKey), lastErr)
}

// target picks the node to send to on this attempt: the leaseholder hint
// if its address is known, else the replicas in turn, else any node; nodes
// found unreachable during this call come last.
func (s *sender) target(e *rangeEntry, attempt int, unreachable map[uint64]bool) (uint64, string) {
	if lh := s.cache.leaseholder(e.desc.GetRangeId()); lh != 0 && !unreachable[lh] && !s.suspects.has(lh) {
		if a, ok := s.nodes.address(lh); ok {
			return lh, a
		}
	}
	reps := e.desc.GetReplicas()
	// First the replicas not found unreachable in this call, then any.
	for _, skip := range []bool{true, false} {
		for i := range reps {
			r := reps[(attempt+i)%len(reps)]
			if skip && (unreachable[r.GetNodeId()] || s.suspects.has(r.GetNodeId())) {
				continue
			}
			if a, ok := s.nodes.address(r.GetNodeId()); ok {
				return r.GetNodeId(), a
			}
		}
	}
	return 0, s.nodes.anyAddress(int(s.cursor.Load()) + attempt)
}

// anyNode sends call to some node, rotating through the known addresses on
// failure and following a NOT_LEASEHOLDER that names an address.
func (s *sender) anyNode(ctx context.Context, what string, call func(ctx context.Context, kv rpcpb.KVClient) (*rpcpb.Error, error)) error {
	bo := s.backoff()
	var lastErr error
	next := ""
	for attempt := 0; attempt < s.timing.sendAttempts(); attempt++ {
		addr := next
		next = ""
		if addr == "" {
			// Back off once per full round over the known addresses.
			if n := s.nodes.addressCount(); attempt > 0 && (n == 0 || attempt%n == 0) {
				if err := sleepCtx(ctx, bo.next()); err != nil {
					lastErr = withLast(err, lastErr)
					break
				}
			}
			addr = s.nodes.anyAddress(int(s.cursor.Load()))
		}
		if err := ctx.Err(); err != nil {
			lastErr = withLast(err, lastErr)
			break
		}
		kv, err := s.nodes.client(addr)
		if err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, min(s.opts.RPCTimeout, s.opts.LookupTimeout))
		pbErr, err := call(actx, kv)
		cancel()
		var se *stopError
		if errors.As(err, &se) {
			return se.err
		}
		if err != nil {
			lastErr = fmt.Errorf("%s: %w", addr, err)
			s.cursor.Add(1)
			continue
		}
		switch pbErr.GetCode() {
		case rpcpb.ErrorCode_OK:
			return nil
		case rpcpb.ErrorCode_NOT_LEASEHOLDER:
			s.nodes.set(pbErr.GetLeaseholderHint(), pbErr.GetLeaseholderAddress())
			next = pbErr.GetLeaseholderAddress()
			if next == "" || next == addr {
				// No usable hint (a partitioned node knows no leader):
				// asking it again gets the same answer until the attempts
				// run out, so move on to the next node.
				next = ""
				s.cursor.Add(1)
			}
		case rpcpb.ErrorCode_INVALID_ARGUMENT, rpcpb.ErrorCode_INTERNAL:
			return errorFromPB(pbErr)
		default:
			s.cursor.Add(1)
		}
		lastErr = fmt.Errorf("%s: %s: %s", addr, pbErr.GetCode(), pbErr.GetMessage())
	}
	return giveUp(false, what, lastErr)
}

// withLast adds the last attempt's error, if any, to err (the context's
// end), which says only why the loop stopped.
func withLast(err, last error) error {
	if last == nil {
		return err
	}
	return fmt.Errorf("%w (last attempt: %v)", err, last)
}

// lookup returns the cached range containing key, or looks it up.
func (s *sender) lookup(ctx context.Context, key []byte) (*rangeEntry, error) {
	if e := s.cache.lookup(key); e != nil {
		return e, nil
	}
	var e *rangeEntry
	err := s.anyNode(ctx, fmt.Sprintf("range lookup of %q", key), func(ctx context.Context, kv rpcpb.KVClient) (*rpcpb.Error, error) {
		resp, err := kv.RangeLookup(ctx, &rpcpb.RangeLookupRequest{Key: key})
		if err != nil {
			return nil, err
		}
		if pe := resp.GetError(); pe.GetCode() != rpcpb.ErrorCode_OK {
			return pe, nil
		}
		if resp.GetRange() == nil || !(&rangeEntry{desc: resp.GetRange()}).contains(key) {
			return &rpcpb.Error{Code: rpcpb.ErrorCode_UNAVAILABLE,
				Message: fmt.Sprintf("range lookup answered %v, which does not contain the key", resp.GetRange())}, nil
		}
		s.nodes.update(resp.GetNodes())
		e = s.cache.insert(resp.GetRange(), resp.GetLeaseholderNodeId())
		if !e.contains(key) {
			// A newer descriptor of the same range was cached meanwhile.
			return &rpcpb.Error{Code: rpcpb.ErrorCode_UNAVAILABLE, Message: "stale range lookup"}, nil
		}
		return nil, nil
	})
	return e, err
}

// sendBatch sends the requests build returns for the descriptor of the
// range containing routeKey, as one BatchRequest (with async_consensus if
// async: a batch of PutIntents answered once proposed). build runs once
// per attempt, with that attempt's descriptor, and may refuse it.
func (s *sender) sendBatch(ctx context.Context, routeKey []byte, write, async bool,
	build func(d *rpcpb.RangeDescriptor) ([]*rpcpb.RequestUnion, error)) ([]*rpcpb.ResponseUnion, *rpcpb.RangeDescriptor, error) {
	var out []*rpcpb.ResponseUnion
	desc, err := s.route(ctx, routeKey, write, func(ctx context.Context, kv rpcpb.KVClient, d *rpcpb.RangeDescriptor) (*rpcpb.Error, error) {
		reqs, err := build(d)
		if err != nil {
			return nil, &stopError{err}
		}
		// A synchronous write or a proof waits for a consensus round
		// (RoundCounter, stats.go).
		done := waitForRound(ctx, (write && !async) || (len(reqs) > 0 && reqs[0].GetQueryIntent() != nil))
		resp, err := kv.Batch(ctx, &rpcpb.BatchRequest{RangeId: d.GetRangeId(), Requests: reqs, AsyncConsensus: async, Protocol: protocolOf(ctx)})
		done()
		if err != nil {
			return nil, err
		}
		if pe := resp.GetError(); pe.GetCode() != rpcpb.ErrorCode_OK {
			return pe, nil
		}
		if len(resp.GetResponses()) != len(reqs) {
			return nil, &stopError{fmt.Errorf("%w: %d responses to %d requests", ErrInternal, len(resp.GetResponses()), len(reqs))}
		}
		out = resp.GetResponses()
		return nil, nil
	})
	return out, desc, err
}

// errRegroup: a batch's keys no longer fall in one range.
var errRegroup = errors.New("client: batch spans ranges; regroup")

// errRegroupMayHaveApplied is errRegroup after an attempt of the batch
// that may have applied (a split came between that attempt and the next).
var errRegroupMayHaveApplied = fmt.Errorf("%w after an attempt that may have applied", errRegroup)

// ambiguousAfterRegroup turns err, the end of a write batch an earlier
// attempt of which may have applied before a regrouping, into
// ErrAmbiguous if it claims that nothing was written (ErrUnavailable):
// the regrouped batch's own routing loop cannot know of that attempt.
func ambiguousAfterRegroup(err error) error {
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrAmbiguous) {
		return err
	}
	// %v, not %w: the error must no longer say "nothing was written".
	return fmt.Errorf("%w: a write may have been applied by an attempt before its range split: %v", ErrAmbiguous, err)
}

// requestKey is the key a point request addresses.
func requestKey(r *rpcpb.RequestUnion) []byte {
	k := r.Key()
	if k == nil || r.GetScan() != nil {
		panic(fmt.Sprintf("client: requestKey of a span request %T", r.GetValue()))
	}
	return k
}

// sendPoints sends point requests (one key each), split into one batch per
// range, the batches in parallel. Responses come back in request order. All
// requests must be reads, or all writes (write).
//
// When several batches fail, a routing error (unavailable, ambiguous)
// wins over protocol errors; protocol errors of one code are merged (their
// intents concatenated) so that the caller resolves all intents at once.
func (s *sender) sendPoints(ctx context.Context, write bool, reqs []*rpcpb.RequestUnion) ([]*rpcpb.ResponseUnion, error) {
	return s.sendPointsWith(ctx, write, false, reqs)
}

// sendPointsWith is sendPoints, with async_consensus on every batch if
// async (reqs must then be PutIntents).
func (s *sender) sendPointsWith(ctx context.Context, write, async bool, reqs []*rpcpb.RequestUnion) ([]*rpcpb.ResponseUnion, error) {
	out := make([]*rpcpb.ResponseUnion, len(reqs))
	pending := make([]int, len(reqs))
	for i := range pending {
		pending[i] = i
	}
	// mayHaveApplied: an attempt of a regrouped write batch may have
	// applied (errRegroupMayHaveApplied).
	mayHaveApplied := false
	fail := func(err error) ([]*rpcpb.ResponseUnion, error) {
		if mayHaveApplied {
			err = ambiguousAfterRegroup(err)
		}
		return nil, err
	}
	for round := 0; len(pending) > 0; round++ {
		if round >= s.opts.SendAttemptsMax {
			return fail(fmt.Errorf("%w: batch still straddles ranges after %d regroupings (SendAttemptsMax)", ErrUnavailable, round))
		}
		groups, err := s.group(ctx, reqs, pending)
		if err != nil {
			return fail(err)
		}
		type result struct {
			resps []*rpcpb.ResponseUnion
			err   error
		}
		results := make([]result, len(groups))
		run := func(gi int) {
			idx := groups[gi]
			resps, _, err := s.sendBatch(ctx, requestKey(reqs[idx[0]]), write, async, func(d *rpcpb.RangeDescriptor) ([]*rpcpb.RequestUnion, error) {
				e := &rangeEntry{desc: d}
				sub := make([]*rpcpb.RequestUnion, len(idx))
				for j, i := range idx {
					if !e.contains(requestKey(reqs[i])) {
						return nil, errRegroup
					}
					sub[j] = reqs[i]
				}
				return sub, nil
			})
			results[gi] = result{resps, err}
		}
		if len(groups) == 1 {
			run(0)
		} else {
			var wg sync.WaitGroup
			for gi := range groups {
				wg.Add(1)
				go func() { defer wg.Done(); run(gi) }()
			}
			wg.Wait()
		}
		var next []int
		var routingErr error
		var merged *rpcpb.Error
		for gi, r := range results {
			var ke *kvError
			switch {
			case r.err == nil:
				for j, i := range groups[gi] {
					out[i] = r.resps[j]
				}
			case errors.Is(r.err, errRegroup):
				next = append(next, groups[gi]...)
				if errors.Is(r.err, errRegroupMayHaveApplied) {
					mayHaveApplied = true
				}
			case errors.As(r.err, &ke):
				if merged == nil {
					merged = proto.Clone(ke.pb).(*rpcpb.Error)
				} else if merged.GetCode() == ke.pb.GetCode() {
					merged.Intents = append(merged.Intents, ke.pb.GetIntents()...)
				}
			default:
				if routingErr == nil {
					routingErr = r.err
				}
			}
		}
		if routingErr != nil {
			return fail(routingErr)
		}
		if merged != nil {
			return nil, &kvError{pb: merged}
		}
		pending = next
	}
	return out, nil
}

// group splits the pending request indices by the cached range of their
// keys, in first-seen order.
func (s *sender) group(ctx context.Context, reqs []*rpcpb.RequestUnion, pending []int) ([][]int, error) {
	var groups [][]int
	byRange := map[uint64]int{}
	for _, i := range pending {
		e, err := s.lookup(ctx, requestKey(reqs[i]))
		if err != nil {
			return nil, err
		}
		gi, ok := byRange[e.desc.GetRangeId()]
		if !ok {
			gi = len(groups)
			byRange[e.desc.GetRangeId()] = gi
			groups = append(groups, nil)
		}
		groups[gi] = append(groups[gi], i)
	}
	return groups, nil
}

// sendOne sends a single point request and returns its response.
func (s *sender) sendOne(ctx context.Context, write bool, r *rpcpb.RequestUnion) (*rpcpb.ResponseUnion, error) {
	resps, err := s.sendPoints(ctx, write, []*rpcpb.RequestUnion{r})
	if err != nil {
		return nil, err
	}
	return resps[0], nil
}

// scan reads [start, end) at ts range by range, in key order, up to limit
// keys (0: no limit but keysMax). When a sub-scan meets intents, onIntents
// (if not nil) resolves them and the sub-scan is repeated, at most
// roundsMax times per position; otherwise the *kvError is returned.
func (s *sender) scan(ctx context.Context, start, end []byte, ts, txnStart uint64, limit, keysMax, roundsMax int,
	onIntents func(ctx context.Context, intents []*rpcpb.Intent) error) ([]*rpcpb.KeyValue, error) {
	var out []*rpcpb.KeyValue
	cur := start
	rounds := 0
	for bytes.Compare(cur, end) < 0 {
		remaining := 0
		if limit > 0 {
			remaining = limit - len(out)
			if remaining <= 0 {
				break
			}
		}
		resps, desc, err := s.sendBatch(ctx, cur, false, false, func(d *rpcpb.RangeDescriptor) ([]*rpcpb.RequestUnion, error) {
			e := end
			if len(d.GetEndKey()) > 0 && bytes.Compare(d.GetEndKey(), end) < 0 {
				e = d.GetEndKey()
			}
			return []*rpcpb.RequestUnion{{Value: &rpcpb.RequestUnion_Scan{Scan: &rpcpb.ScanRequest{
				Start: cur, End: e, Ts: ts, TxnStart: txnStart, Limit: uint32(remaining),
			}}}}, nil
		})
		if pb, ok := asKVError(err, rpcpb.ErrorCode_INTENT_FOUND); ok && onIntents != nil && rounds < roundsMax {
			rounds++
			if err := onIntents(ctx, pb.GetIntents()); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		rounds = 0
		resp := resps[0].GetScan()
		if resp == nil {
			return nil, fmt.Errorf("%w: scan answered with %T", ErrInternal, resps[0].GetValue())
		}
		kvs := resp.GetKvs()
		if remaining > 0 && len(kvs) > remaining {
			kvs = kvs[:remaining]
		}
		out = append(out, kvs...)
		if limit == 0 && len(out) > keysMax {
			return nil, invalidArgf("scan of [%q, %q) returns more than ScanKeysMax=%d keys; pass a limit", start, end, keysMax)
		}
		switch {
		case len(resp.GetResumeKey()) > 0:
			if bytes.Compare(resp.GetResumeKey(), cur) <= 0 {
				return nil, fmt.Errorf("%w: scan resume key %q does not advance past %q", ErrInternal, resp.GetResumeKey(), cur)
			}
			cur = resp.GetResumeKey()
		case len(desc.GetEndKey()) == 0 || bytes.Compare(desc.GetEndKey(), end) >= 0:
			return out, nil
		default:
			cur = desc.GetEndKey()
		}
	}
	return out, nil
}

// refreshSpansPerBatchMax bounds the spans of one RefreshRequest, so that a
// large read set never makes a request above keys.RequestBytesMax
// (1000 spans of two keys of at most keys.KeyBytesMax = 8 MiB).
const refreshSpansPerBatchMax = 1000

// refresh runs the serializable commit check over spans: one
// RefreshRequest per range (and per refreshSpansPerBatchMax spans), in
// parallel. Spans crossing range boundaries are cut at them.
func (s *sender) refresh(ctx context.Context, spans []*rpcpb.Span, fromTs, toTs, txnStart uint64) error {
	for round := 0; round < s.opts.SendAttemptsMax; round++ {
		groups, err := s.groupSpans(ctx, spans)
		if err != nil {
			return err
		}
		errs := eachConcurrently(len(groups), func(gi int) error {
			g := groups[gi]
			_, _, err := s.sendBatch(ctx, g[0].GetStart(), false, false, func(d *rpcpb.RangeDescriptor) ([]*rpcpb.RequestUnion, error) {
				e := &rangeEntry{desc: d}
				for _, sp := range g {
					if !e.contains(sp.GetStart()) || (len(sp.GetEnd()) > 0 && len(d.GetEndKey()) > 0 && bytes.Compare(sp.GetEnd(), d.GetEndKey()) > 0) {
						return nil, errRegroup
					}
				}
				return []*rpcpb.RequestUnion{{Value: &rpcpb.RequestUnion_Refresh{Refresh: &rpcpb.RefreshRequest{
					Spans: g, FromTs: fromTs, ToTs: toTs, TxnStart: txnStart,
				}}}}, nil
			})
			return err
		})
		regroup := false
		var routingErr error
		var merged *rpcpb.Error
		for _, err := range errs {
			var ke *kvError
			switch {
			case err == nil:
			case errors.Is(err, errRegroup):
				regroup = true
			case errors.As(err, &ke):
				if merged == nil {
					merged = proto.Clone(ke.pb).(*rpcpb.Error)
				} else if merged.GetCode() == ke.pb.GetCode() {
					merged.Intents = append(merged.Intents, ke.pb.GetIntents()...)
				}
			default:
				if routingErr == nil {
					routingErr = err
				}
			}
		}
		switch {
		case routingErr != nil:
			return routingErr
		case merged != nil:
			return &kvError{pb: merged}
		case !regroup:
			return nil
		}
	}
	return fmt.Errorf("%w: refresh spans kept straddling ranges (SendAttemptsMax=%d)", ErrUnavailable, s.opts.SendAttemptsMax)
}

// groupSpans cuts spans at the cached range boundaries and groups the
// pieces by range, at most refreshSpansPerBatchMax per group.
func (s *sender) groupSpans(ctx context.Context, spans []*rpcpb.Span) ([][]*rpcpb.Span, error) {
	var groups [][]*rpcpb.Span
	byRange := map[uint64]int{}
	add := func(rid uint64, sp *rpcpb.Span) {
		gi, ok := byRange[rid]
		if !ok || len(groups[gi]) >= refreshSpansPerBatchMax {
			gi = len(groups)
			byRange[rid] = gi
			groups = append(groups, nil)
		}
		groups[gi] = append(groups[gi], sp)
	}
	for _, sp := range spans {
		if len(sp.GetEnd()) == 0 {
			e, err := s.lookup(ctx, sp.GetStart())
			if err != nil {
				return nil, err
			}
			add(e.desc.GetRangeId(), sp)
			continue
		}
		cur := sp.GetStart()
		for bytes.Compare(cur, sp.GetEnd()) < 0 {
			e, err := s.lookup(ctx, cur)
			if err != nil {
				return nil, err
			}
			end := sp.GetEnd()
			dEnd := e.desc.GetEndKey()
			if len(dEnd) > 0 && bytes.Compare(dEnd, end) < 0 {
				end = dEnd
			}
			add(e.desc.GetRangeId(), &rpcpb.Span{Start: cur, End: end})
			cur = end
		}
	}
	return groups, nil
}

// isTimeout reports whether a transport error is the attempt running out
// of time (no answer), rather than an answer that is an error.
func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded
}

// proxyHeader is kvserver.ProxyHeader (the client does not import
// kvserver).
const proxyHeader = "canopy-proxy"

// eachConcurrently calls f(0), ..., f(n-1), each on its own goroutine, and
// returns when all have returned, with their errors indexed as the calls
// (a request's parts sent to their ranges at once).
func eachConcurrently(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errs
}
