package kvserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/changefeed"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Change feeds at the leaseholder (issue 12; internal/changefeed has the
// guarantees and why they hold).
//
// Each range's state machine carries a rangeFeed: the tracker of its
// writes in flight, and the rangefeed processor while the range is watched
// here. The hooks in the request and apply paths are:
//
//   - writeOnce tracks every write from before it takes a timestamp until
//     its proposal has applied or is known never to apply (trackWrite), and
//     refuses a write whose timestamp is not above the closed timestamp it
//     published (never expected: see changefeed's package comment);
//   - rangeSM.Apply hands the ops of every evaluated command to the
//     processor (feedApplied) and stops it on a split or a command of
//     another term; Flushed publishes them once their batch has committed;
//   - closeTimestamps, every Config.ClosedTimestampInterval, takes one
//     oracle timestamp for the node and closes it on every watched range
//     whose leadership is confirmed after it was handed out (lease, or
//     ReadIndex on a range whose lease lapsed), and stops the processors
//     of ranges the node no longer leads in their term.

// DefaultClosedTimestampInterval is Config.ClosedTimestampInterval's
// default: how often a node closes timestamps on the ranges watched there,
// hence about how far resolved timestamps lag behind the oracle.
const DefaultClosedTimestampInterval = 200 * time.Millisecond

// Limits of a rangefeed stream.
const (
	// FeedValuesPerMessage bounds the changes in one RangeFeedEvent;
	// FeedMessageBytesMax their bytes (a single larger value goes alone).
	FeedValuesPerMessage = 256
	FeedMessageBytesMax  = 1 << 20
	// feedInitWaitMax bounds the wait for the engine to hold the commands
	// applied before a processor was installed (one batch commit).
	feedInitWaitMax = 5 * time.Second
	// feedIdleRoundsMax: a processor without watchers for this many
	// closed-timestamp rounds is removed, so that an unwatched range
	// neither decodes its commands nor wakes to close timestamps.
	feedIdleRoundsMax = 3
)

// rangeFeed is a range's change-feed state on this node.
type rangeFeed struct {
	// tracker: writes in flight at this replica as leaseholder.
	tracker changefeed.Tracker
	// closed is the last closed timestamp published for the range here.
	closed atomic.Uint64
	// initMu serializes feedProcessor: a processor is handed out only
	// once initialized (a registration made before Init would miss the
	// commands applied before the processor was installed, and those Init
	// drops from the ones flushed meanwhile). Taken before mu.
	initMu sync.Mutex
	mu     struct {
		sync.Mutex
		// proc is the range's processor while it is watched here, for the
		// Raft term term; nil otherwise.
		proc *changefeed.Processor
		term uint64
		// lastApplied is the index of the last evaluated command applied
		// here, whether a processor was installed or not: a new
		// processor's first snapshot must include it. (Not only the
		// commands applied with no processor: one staged in a processor
		// that stopped before its batch committed was never published, so
		// the next processor must find it in its snapshot.)
		lastApplied uint64
		// idleRounds counts the closeTimestamps rounds that found the
		// processor without watchers; at feedIdleRoundsMax it goes.
		idleRounds int
	}
}

// feedStop is what ends a range's processor, as the wire tells watchers.
type feedStop struct {
	reason rpcpb.FeedError_Reason
	err    *rpcpb.Error
}

func (e *feedStop) Error() string { return fmt.Sprintf("%s: %s", e.reason, e.err.GetMessage()) }

func (n *Node) feedOptions() changefeed.Options {
	return changefeed.Options{EventsMax: n.cfg.FeedEventsMax, BytesMax: n.cfg.FeedBytesMax}
}

// trackWrite registers a write about to take a timestamp at the range's
// leaseholder, with the node's last closed-timestamp candidate as bound.
func (n *Node) trackWrite(rr *rangeReplica) *changefeed.Token {
	return rr.sm.feed.tracker.Track(n.feedCandidate.Load())
}

// checkAboveClosed refuses a write at writeTs if the range published a
// closed timestamp at or above it (retryable: nothing was written).
func checkAboveClosed(rr *rangeReplica, writeTs uint64) *rpcpb.Error {
	if c := rr.sm.feed.closed.Load(); writeTs != 0 && writeTs <= c {
		return pbErr(rpcpb.ErrorCode_UNAVAILABLE, "range r%d: write timestamp %d is not above the closed timestamp %d; retry", rr.r.RangeID(), writeTs, c)
	}
	return nil
}

// feedApplied is rangeSM.Apply's hook for an applied evaluated command.
func (s *rangeSM) feedApplied(index, term uint64, repr []byte) {
	s.feed.mu.Lock()
	s.feed.mu.lastApplied = index
	p := s.feed.mu.proc
	if p == nil {
		s.feed.mu.Unlock()
		return
	}
	if fterm := s.feed.mu.term; term != fterm {
		s.feed.mu.proc = nil
		s.feed.mu.Unlock()
		p.Stop(&feedStop{rpcpb.FeedError_RETRY, pbErr(rpcpb.ErrorCode_NOT_LEASEHOLDER, "range r%d: a command of term %d applied; the feed belonged to term %d", s.rangeID, term, fterm)})
		return
	}
	s.feed.mu.Unlock()
	ops, err := changefeed.DecodeOps(s.n.Engine().ReadRepr, repr)
	if err != nil {
		s.feedStop(&feedStop{rpcpb.FeedError_RETRY, pbErr(rpcpb.ErrorCode_INTERNAL, "range r%d: entry %d: %v", s.rangeID, index, err)})
		return
	}
	p.Stage(index, ops)
}

// Flushed implements replica.FlushObserver.
func (s *rangeSM) Flushed(index uint64) {
	s.keys.flushed() // keystates.go
	s.feed.mu.Lock()
	p := s.feed.mu.proc
	s.feed.mu.Unlock()
	if p != nil {
		p.Flush(index)
	}
}

// feedStop stops the range's processor, if any, with err.
func (s *rangeSM) feedStop(err *feedStop) {
	s.feed.mu.Lock()
	p := s.feed.mu.proc
	s.feed.mu.proc = nil
	s.feed.mu.Unlock()
	if p != nil {
		p.Stop(err)
	}
}

// feedProcessor returns the range's processor, installing and
// initializing one if there is none for the current term. The replica must
// be the leaseholder.
func (n *Node) feedProcessor(ctx context.Context, rr *rangeReplica) (*changefeed.Processor, *rpcpb.Error) {
	st := rr.r.Status()
	if !st.Leaseholder {
		return nil, n.notLeaseholder(rr)
	}
	s := rr.sm
	s.feed.initMu.Lock()
	defer s.feed.initMu.Unlock()
	s.feed.mu.Lock()
	if p := s.feed.mu.proc; p != nil && s.feed.mu.term == st.Term && p.Stopped() == nil {
		s.feed.mu.Unlock()
		return p, nil // initialized: its installer held initMu until Init
	}
	old := s.feed.mu.proc
	p := changefeed.NewProcessor(n.feedOptions())
	s.feed.mu.proc, s.feed.mu.term = p, st.Term
	s.feed.mu.idleRounds = 0
	lastApplied := s.feed.mu.lastApplied
	s.feed.mu.Unlock()
	feedStepHook(n, rr, "processor-installed")
	if old != nil {
		old.Stop(&feedStop{rpcpb.FeedError_RETRY, pbErr(rpcpb.ErrorCode_NOT_LEASEHOLDER, "range r%d: leadership changed term", rr.r.RangeID())})
	}
	fail := func(e *rpcpb.Error) (*changefeed.Processor, *rpcpb.Error) {
		s.feedStop(&feedStop{rpcpb.FeedError_RETRY, e})
		return nil, e
	}
	// The snapshot must hold every command applied before the processor
	// was installed (those after are staged in it); the batch of the last
	// one commits right after it applied.
	deadline := time.Now().Add(feedInitWaitMax)
	for {
		snap := n.eng.NewSnapshot()
		applied, err := replica.LoadAppliedIndex(snap, rr.r.RangeID())
		if err != nil {
			snap.Close()
			return fail(pbErr(rpcpb.ErrorCode_INTERNAL, "range r%d: %v", rr.r.RangeID(), err))
		}
		if applied < lastApplied {
			snap.Close()
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "range r%d: applied index %d not yet committed", rr.r.RangeID(), lastApplied))
			}
			time.Sleep(time.Millisecond)
			continue
		}
		start, end := userPart(s.Desc())
		intents, err := changefeed.ScanIntents(snap, start, end)
		snap.Close()
		if err != nil {
			return fail(pbErr(rpcpb.ErrorCode_INTERNAL, "range r%d: %v", rr.r.RangeID(), err))
		}
		p.Init(applied, intents)
		break
	}
	n.feedsMu.Lock()
	n.feeds[rr.r.RangeID()] = rr
	n.feedsMu.Unlock()
	return p, nil
}

// feedStepHook calls testingHooks.feedStep, if set.
func feedStepHook(n *Node, rr *rangeReplica, step string) {
	if h := testingHooks.feedStep; h != nil {
		h(n, rr.r.RangeID(), step)
	}
}

// userPart returns the part of the range's span in the user keyspace
// (possibly empty).
func userPart(d *rpcpb.RangeDescriptor) (start, end []byte) {
	start, end = d.StartKey, d.EndKey
	if bytes.Compare(start, keys.UserPrefix) < 0 {
		start = keys.UserPrefix
	}
	if len(end) == 0 || bytes.Compare(end, keys.UserEnd) > 0 {
		end = keys.UserEnd
	}
	if bytes.Compare(start, end) > 0 {
		start = end
	}
	return start, end
}

// closeTimestamps closes a fresh oracle timestamp on every range watched
// here whose leadership, in its processor's term, is confirmed after the
// timestamp was handed out. See the package comment of changefeed.
func (n *Node) closeTimestamps() {
	n.feedsMu.Lock()
	watched := make([]*rangeReplica, 0, len(n.feeds))
	for id, rr := range n.feeds {
		rr.sm.feed.mu.Lock()
		p := rr.sm.feed.mu.proc
		rr.sm.feed.mu.Unlock()
		if p == nil || p.Stopped() != nil {
			delete(n.feeds, id)
			continue
		}
		if n.replica(id) != rr {
			// The replica left the node (or was replaced): its watchers
			// look the range up again.
			rr.sm.feedStop(&feedStop{rpcpb.FeedError_RETRY, pbErr(rpcpb.ErrorCode_RANGE_NOT_FOUND, "node n%d no longer holds this replica of r%d", n.NodeID(), id)})
			delete(n.feeds, id)
			continue
		}
		watched = append(watched, rr)
	}
	n.feedsMu.Unlock()
	if len(watched) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(n.stopCtx, n.cfg.ClosedTimestampInterval*5)
	defer cancel()
	candidate, e := n.timestamp(ctx)
	if e != nil {
		n.log.Debug("closed timestamps: oracle", "err", e.GetMessage())
		return
	}
	// Writes that start tracking from now on use it as their bound.
	n.feedCandidate.Store(candidate)
	var wg sync.WaitGroup
	for _, rr := range watched {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.closeRange(ctx, rr, candidate)
		}()
	}
	wg.Wait()
}

// closeRange closes candidate (min the range's tracked bounds) on rr.
func (n *Node) closeRange(ctx context.Context, rr *rangeReplica, candidate uint64) {
	s := rr.sm
	s.feed.mu.Lock()
	p, term := s.feed.mu.proc, s.feed.mu.term
	if p != nil && p.Registrations() == 0 {
		if s.feed.mu.idleRounds++; s.feed.mu.idleRounds >= feedIdleRoundsMax {
			s.feed.mu.proc = nil
			s.feed.mu.Unlock()
			p.Stop(&feedStop{rpcpb.FeedError_RETRY, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "range r%d: rangefeed removed for lack of watchers", rr.r.RangeID())})
			return
		}
	} else {
		s.feed.mu.idleRounds = 0
	}
	s.feed.mu.Unlock()
	if p == nil {
		return
	}
	lost := func() {
		s.feed.mu.Lock()
		if s.feed.mu.proc == p {
			s.feed.mu.proc = nil
		}
		s.feed.mu.Unlock()
		p.Stop(&feedStop{rpcpb.FeedError_RETRY, n.notLeaseholder(rr)})
	}
	// The tracked bounds are read before leadership is confirmed: a write
	// untracked meanwhile because its proposal was abandoned in a step-down
	// (it may still apply under the next leader) still counts, and the
	// confirmation below then fails. A write tracked after this read takes
	// its timestamp after candidate was handed out.
	c := s.feed.tracker.Closed(candidate)
	st := rr.r.Status()
	if !st.Leaseholder || st.Term != term {
		lost()
		return
	}
	if !st.LeaseValid(rr.r.Now()) {
		// The lease lapsed (the range quiesced, or is busy renewing it):
		// confirm leadership with a quorum, which wakes the range.
		if err := rr.r.ReadIndex(ctx); err != nil {
			if errors.Is(err, replica.ErrNotLeader) {
				lost()
			}
			return
		}
		if st = rr.r.Status(); !st.Leaseholder || st.Term != term {
			lost()
			return
		}
	}
	for {
		old := s.feed.closed.Load()
		if c <= old || s.feed.closed.CompareAndSwap(old, c) {
			break
		}
	}
	p.SetClosed(c)
}

// FeedStatus reports, for tests and status, a range's rangefeed here: its
// resolved and closed timestamps and watchers; ok is false if none.
func (n *Node) FeedStatus(rangeID uint64) (resolved, closed uint64, watchers int, ok bool) {
	p := n.feedProc(rangeID)
	if p == nil {
		return 0, 0, 0, false
	}
	resolved, closed = p.Resolved()
	return resolved, closed, p.Registrations(), true
}

// FeedOldestIntent reports, for tests, the unresolved intent with the
// smallest start timestamp that a range's rangefeed here follows (what
// holds its resolved timestamp back), or nil.
func (n *Node) FeedOldestIntent(rangeID uint64) *changefeed.Intent {
	if p := n.feedProc(rangeID); p != nil {
		return p.Oldest()
	}
	return nil
}

// feedProc returns the range's rangefeed processor here, or nil.
func (n *Node) feedProc(rangeID uint64) *changefeed.Processor {
	rr := n.replica(rangeID)
	if rr == nil {
		return nil
	}
	rr.sm.feed.mu.Lock()
	defer rr.sm.feed.mu.Unlock()
	return rr.sm.feed.mu.proc
}

// feedService serves rpcpb.Feed.
type feedService struct {
	rpcpb.UnimplementedFeedServer
	n *Node
}

// RangeFeed implements rpcpb.FeedServer.
func (s *feedService) RangeFeed(req *rpcpb.RangeFeedRequest, stream rpcpb.Feed_RangeFeedServer) error {
	n := s.n
	// Counted like unary handlers (trackHandler), so that Stop waits for
	// it before closing the engine its catch-up scan reads.
	n.handlersMu.RLock()
	if n.handlersStopped {
		n.handlersMu.RUnlock()
		return status.Error(codes.Unavailable, "node is stopping")
	}
	n.handlers.Add(1)
	n.handlersMu.RUnlock()
	defer n.handlers.Done()
	ctx := stream.Context()
	fe := n.rangeFeed(ctx, req, stream.Send)
	if fe == nil {
		return ctx.Err()
	}
	return stream.Send(&rpcpb.RangeFeedEvent{Error: fe})
}

func feedErr(reason rpcpb.FeedError_Reason, e *rpcpb.Error) *rpcpb.FeedError {
	return &rpcpb.FeedError{Reason: reason, Error: e}
}

// rangeFeed runs one rangefeed until it fails (the returned error is the
// stream's last message) or ctx ends (nil).
func (n *Node) rangeFeed(ctx context.Context, req *rpcpb.RangeFeedRequest, send func(*rpcpb.RangeFeedEvent) error) *rpcpb.FeedError {
	retry := func(e *rpcpb.Error) *rpcpb.FeedError { return feedErr(rpcpb.FeedError_RETRY, e) }
	if !n.bootstrapped() {
		return retry(pbErr(rpcpb.ErrorCode_NOT_BOOTSTRAPPED, "node is not part of a cluster yet: run canopy init"))
	}
	if p := n.commitProtocol(); p.Hierarchy() {
		// Hierarchy decisions choose commit timestamps that closed
		// timestamps do not account for: a resolved timestamp could promise
		// what a later decision breaks.
		return feedErr(rpcpb.FeedError_INVALID_ARGUMENT, pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT,
			"watch is not supported on a cluster that runs the %s commit protocol (its commit timestamps are not bounded by closed timestamps); use default or 2pc-locking", p))
	}
	start, end := req.StartKey, req.EndKey
	if len(start) == 0 || len(end) == 0 || bytes.Compare(start, end) >= 0 ||
		bytes.Compare(start, keys.UserPrefix) < 0 || bytes.Compare(end, keys.UserEnd) > 0 {
		return feedErr(rpcpb.FeedError_INVALID_ARGUMENT, pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT,
			"rangefeed span [%q, %q) is empty or not inside the user keyspace", start, end))
	}
	rr := n.replica(req.RangeId)
	if rr == nil || rr.sm.Desc() == nil {
		return retry(pbErr(rpcpb.ErrorCode_RANGE_NOT_FOUND, "node n%d has no replica of range r%d", n.NodeID(), req.RangeId))
	}
	desc := rr.sm.Desc()
	if bytes.Compare(start, desc.StartKey) < 0 || bytes.Compare(end, desc.EndKey) > 0 {
		e := pbErr(rpcpb.ErrorCode_RANGE_KEY_MISMATCH, "rangefeed span [%q, %q) is not inside r%d [%q, %q)", start, end, desc.RangeId, desc.StartKey, desc.EndKey)
		e.Range = desc
		return feedErr(rpcpb.FeedError_RANGE_CHANGED, e)
	}
	feedStepHook(n, rr, "span-checked")
	wctx, cancel := context.WithTimeout(ctx, n.electionTimeout())
	err := rr.r.WaitLeaseholder(wctx)
	cancel()
	if err != nil {
		return retry(n.proposeErr(rr, err))
	}
	p, e := n.feedProcessor(ctx, rr)
	if e != nil {
		return retry(e)
	}
	// The catch-up snapshot and the registration, with no Flush between:
	// the snapshot is taken under the processor's lock, so every command
	// it lacks is published after the registration (a snapshot taken
	// before the lock would miss the commands published in between, which
	// the registration would not see live either).
	var (
		reg  *changefeed.Registration
		fe   *rpcpb.FeedError
		snap *storage.Snapshot
	)
	feedStepHook(n, rr, "before-register")
	p.Locked(func() {
		snap = n.eng.NewSnapshot()
		applied, err := replica.LoadAppliedIndex(snap, rr.r.RangeID())
		if err != nil {
			fe = retry(pbErr(rpcpb.ErrorCode_INTERNAL, "range r%d: %v", rr.r.RangeID(), err))
			return
		}
		threshold, err := loadGCThreshold(snap, rr.r.RangeID())
		if err != nil {
			fe = retry(pbErr(rpcpb.ErrorCode_INTERNAL, "range r%d: %v", rr.r.RangeID(), err))
			return
		}
		if req.FromTs < threshold {
			fe = &rpcpb.FeedError{Reason: rpcpb.FeedError_COMPACTED, GcThreshold: threshold,
				Error: pbErr(rpcpb.ErrorCode_TS_BELOW_GC_THRESHOLD, "range r%d: history from %d is compacted: the version-GC threshold is %d", rr.r.RangeID(), req.FromTs, threshold)}
			return
		}
		reg, err = p.RegisterLocked(start, end, req.FromTs, applied)
		if err != nil {
			fe = stopToFeedErr(err)
		}
	})
	defer snap.Close()
	if fe != nil {
		return fe
	}
	defer reg.Close()
	if rr.sm.Desc().GetGeneration() != desc.GetGeneration() {
		// A split applied after the span was checked against desc: the
		// span may reach past the range (the processor, installed after
		// the split, follows the left side only). A split from here on
		// stops the processor.
		return feedErr(rpcpb.FeedError_RANGE_CHANGED, pbErr(rpcpb.ErrorCode_RANGE_KEY_MISMATCH, "range r%d changed", rr.r.RangeID()))
	}
	out := &rpcpb.RangeFeedEvent{}
	outBytes := 0
	flush := func() error {
		if len(out.Values) == 0 && out.Checkpoint == nil {
			return nil
		}
		err := send(out)
		out, outBytes = &rpcpb.RangeFeedEvent{}, 0
		return err
	}
	add := func(ev changefeed.Event) error {
		if ev.Resolved != 0 {
			cp := &rpcpb.FeedCheckpoint{ResolvedTs: ev.Resolved}
			if b := ev.Blocking; b != nil {
				cp.Blocking = &rpcpb.Intent{Key: b.Key, Txn: &rpcpb.TxnMeta{StartTs: b.StartTs, HeartbeatKey: b.HeartbeatKey}}
			}
			out.Checkpoint = cp
			return flush()
		}
		out.Values = append(out.Values, &rpcpb.FeedValue{Key: ev.Key, Value: ev.Value, Deleted: ev.Deleted, CommitTs: ev.Ts})
		outBytes += len(ev.Key) + len(ev.Value)
		if len(out.Values) >= FeedValuesPerMessage || outBytes >= FeedMessageBytesMax {
			return flush()
		}
		return nil
	}
	if err := changefeed.CatchUp(snap, start, end, req.FromTs, add); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return retry(pbErr(rpcpb.ErrorCode_INTERNAL, "range r%d: catch-up scan: %v", rr.r.RangeID(), err))
	}
	if err := flush(); err != nil {
		return nil
	}
	snap.Close()
	for {
		evs, err := reg.Next(ctx)
		for _, ev := range evs {
			if add(ev) != nil {
				return nil
			}
		}
		if flush() != nil {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return stopToFeedErr(err)
		}
	}
}

// stopToFeedErr maps a registration's end to the wire.
func stopToFeedErr(err error) *rpcpb.FeedError {
	var fs *feedStop
	switch {
	case errors.As(err, &fs):
		return feedErr(fs.reason, fs.err)
	case errors.Is(err, changefeed.ErrSlowConsumer):
		return feedErr(rpcpb.FeedError_SLOW_CONSUMER, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "%v", err))
	case errors.Is(err, changefeed.ErrTooManyWatchers):
		return feedErr(rpcpb.FeedError_RETRY, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "%v", err))
	}
	return feedErr(rpcpb.FeedError_RETRY, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "%v", err))
}
