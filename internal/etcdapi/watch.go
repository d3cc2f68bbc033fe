package etcdapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/canopy-db/canopy/client"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// watchServer is etcd's Watch service. Each watch of a stream is a
// client.DB.Watch of its span of the data keyspace. That watch delivers
// changes per key in commit order but may interleave keys out of order,
// with resolved timestamps; etcd promises events in revision order. So a
// watch holds the changes it receives until a resolved timestamp covers
// them, then sends them sorted by revision (commit timestamp), all the
// changes of one revision in one response. A resolved timestamp is also
// what a progress notification reports: every event at or below the
// header's revision has been sent.
type watchServer struct{ s *Server }

// watchEventsPerResponseMax bounds the events of one WatchResponse (more
// go in several, never splitting a revision).
const watchEventsPerResponseMax = 1000

// watchSession is one Watch stream.
type watchSession struct {
	s      *Server
	db     *client.DB
	stream pb.Watch_WatchServer
	ctx    context.Context
	sendMu sync.Mutex
	wg     sync.WaitGroup
	mu     struct {
		sync.Mutex
		nextID  int64
		watches map[int64]*watch
	}
}

// watch is one watch of a session.
type watch struct {
	id     int64
	cancel context.CancelFunc
	// resolved is the revision up to which every event has been sent
	// (guarded by the session's mu).
	resolved int64
}

func (w *watchServer) Watch(stream pb.Watch_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	db, err := w.s.db(ctx)
	if err != nil {
		return err
	}
	ss := &watchSession{s: w.s, db: db, stream: stream, ctx: ctx}
	ss.mu.watches = map[int64]*watch{}
	defer ss.wg.Wait()
	defer cancel()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch v := req.RequestUnion.(type) {
		case *pb.WatchRequest_CreateRequest:
			if err := ss.create(v.CreateRequest); err != nil {
				return err
			}
		case *pb.WatchRequest_CancelRequest:
			ss.mu.Lock()
			wt := ss.mu.watches[v.CancelRequest.WatchId]
			delete(ss.mu.watches, v.CancelRequest.WatchId)
			ss.mu.Unlock()
			if wt != nil {
				wt.cancel()
				if err := ss.send(&pb.WatchResponse{Header: w.s.header(wt.resolvedRev(ss)), WatchId: wt.id, Canceled: true}); err != nil {
					return err
				}
			}
		case *pb.WatchRequest_ProgressRequest:
			rev, err := ss.progress()
			if err != nil {
				return err
			}
			if err := ss.send(&pb.WatchResponse{Header: w.s.header(rev), WatchId: -1}); err != nil {
				return err
			}
		}
	}
}

func (wt *watch) resolvedRev(ss *watchSession) int64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return wt.resolved
}

// progress is the revision of a requested progress notification: the
// least of the session's watches' resolved revisions, or a fresh one if
// it has none.
func (ss *watchSession) progress() (int64, error) {
	ss.mu.Lock()
	rev := int64(0)
	for _, wt := range ss.mu.watches {
		if rev == 0 || wt.resolved < rev {
			rev = wt.resolved
		}
	}
	ss.mu.Unlock()
	if rev != 0 {
		return rev, nil
	}
	ts, err := ss.db.Timestamp(ss.ctx)
	if err != nil {
		return 0, toStatus(err)
	}
	return int64(ts), nil
}

func (ss *watchSession) send(r *pb.WatchResponse) error {
	ss.sendMu.Lock()
	defer ss.sendMu.Unlock()
	return ss.stream.Send(r)
}

// create starts a watch; a watch that cannot start is reported created
// and cancelled, with the reason, as etcd does.
func (ss *watchSession) create(r *pb.WatchCreateRequest) error {
	refuse := func(id int64, rev int64, reason string, compact int64) error {
		if ss.s.stopping() {
			return errStopping // the stream breaks: the client watches again elsewhere
		}
		if err := ss.send(&pb.WatchResponse{Header: ss.s.header(rev), WatchId: id, Created: true}); err != nil {
			return err
		}
		return ss.send(&pb.WatchResponse{Header: ss.s.header(rev), WatchId: id, Canceled: true, CancelReason: reason, CompactRevision: compact})
	}
	ss.mu.Lock()
	id := r.WatchId
	if id == 0 { // AutoWatchID
		for {
			if _, used := ss.mu.watches[ss.mu.nextID]; !used {
				break
			}
			ss.mu.nextID++
		}
		id = ss.mu.nextID
		ss.mu.nextID++
	}
	_, dup := ss.mu.watches[id]
	full := len(ss.mu.watches) >= ss.s.opts.WatchersPerStreamMax
	ss.mu.Unlock()
	switch {
	case dup:
		return refuse(id, 0, "etcdserver: duplicate watch ID provided on the WatchStream", 0)
	case full:
		return refuse(id, 0, fmt.Sprintf("etcdapi: more than %d watches on one stream (etcdapi.Options.WatchersPerStreamMax)", ss.s.opts.WatchersPerStreamMax), 0)
	case checkKey(r.Key) != nil:
		return refuse(id, 0, checkKey(r.Key).Error(), 0)
	case r.StartRevision < 0:
		return refuse(id, 0, "etcdapi: negative start revision", 0)
	}
	var compacted int64
	err := ss.db.Txn(ss.ctx, func(ctx context.Context, txn *client.Txn) error {
		v, ok, err := txn.Get(ctx, compactKey)
		if err != nil || !ok {
			return err
		}
		compacted, err = decodeRev(v)
		return err
	})
	if err != nil {
		return refuse(id, 0, toStatus(err).Error(), 0)
	}
	if r.StartRevision > 0 && r.StartRevision < compacted {
		return refuse(id, 0, "etcdserver: mvcc: required revision has been compacted", compacted)
	}
	start, end := dataSpan(r.Key, r.RangeEnd)
	var fromTs uint64
	if r.StartRevision > 0 {
		// From the start revision on; 0 would mean "from now" to
		// client.DB.Watch, and no Canopy timestamp is as small as 1.
		fromTs = uint64(max(r.StartRevision-1, 1))
	}
	wctx, cancel := context.WithCancel(ss.ctx)
	// RetryUntilDone: an etcd watch lasts until its client cancels it or
	// its history is compacted; a range that cannot be followed for a
	// while (a leaseholder stopped on a loaded machine) is no reason to
	// end it, and etcd's Go client would drop the reason (it closes the
	// channel without an error).
	cw, err := ss.db.Watch(wctx, client.Span{Start: start, End: end}, fromTs,
		client.WithWatchOptions(client.WatchOptions{RetryUntilDone: true}))
	if err != nil {
		cancel()
		return refuse(id, 0, toStatus(err).Error(), 0)
	}
	wt := &watch{id: id, cancel: cancel, resolved: int64(cw.FromTs())}
	ss.mu.Lock()
	ss.mu.watches[id] = wt
	ss.mu.Unlock()
	if err := ss.send(&pb.WatchResponse{Header: ss.s.header(int64(cw.FromTs())), WatchId: id, Created: true}); err != nil {
		cancel()
		return err
	}
	ss.wg.Add(1)
	go func() {
		defer ss.wg.Done()
		defer cancel()
		ss.run(wctx, wt, r, cw)
	}()
	return nil
}

// run forwards a watch's changes in revision order until it ends.
func (ss *watchSession) run(ctx context.Context, wt *watch, r *pb.WatchCreateRequest, cw *client.Watcher) {
	noPut, noDelete := false, false
	for _, f := range r.Filters {
		switch f {
		case pb.WatchCreateRequest_NOPUT:
			noPut = true
		case pb.WatchCreateRequest_NODELETE:
			noDelete = true
		}
	}
	var held []client.WatchEvent
	lastSent := time.Now()
	cancelWith := func(reason string, compact int64) {
		ss.mu.Lock()
		_, still := ss.mu.watches[wt.id]
		delete(ss.mu.watches, wt.id)
		rev := wt.resolved
		ss.mu.Unlock()
		if !still || ss.s.stopping() {
			// Cancelled by the client already; or the node is stopping
			// (its client closed first): no cancellation, which etcd's Go
			// client would take as final; the stream breaks in a moment
			// and the client resumes the watch on another node from its
			// last revision.
			return
		}
		// Logged: etcd's Go client (clientv3) closes the watch channel on
		// a cancellation without passing the reason on.
		ss.s.opts.Logger.Error("etcdapi: watch cancelled by the server", "watch_id", wt.id, "reason", reason, "compact_revision", compact)
		_ = ss.send(&pb.WatchResponse{Header: ss.s.header(rev), WatchId: wt.id, Canceled: true, CancelReason: reason, CompactRevision: compact})
	}
	for ev := range cw.Events() {
		if ev.Resolved == 0 {
			if len(held) >= ss.s.opts.WatchEventsBufferedMax {
				cw.Close()
				cancelWith(fmt.Sprintf("etcdapi: more than %d changes arrived before a resolved timestamp (etcdapi.Options.WatchEventsBufferedMax)", ss.s.opts.WatchEventsBufferedMax), 0)
				return
			}
			held = append(held, ev)
			continue
		}
		sort.SliceStable(held, func(i, j int) bool { return held[i].Ts < held[j].Ts })
		n := sort.Search(len(held), func(i int) bool { return held[i].Ts > ev.Resolved })
		ready := held[:n]
		var events []*mvccpb.Event
		flush := func() error {
			if len(events) == 0 {
				return nil
			}
			err := ss.send(&pb.WatchResponse{Header: ss.s.header(int64(ev.Resolved)), WatchId: wt.id, Events: events})
			events, lastSent = nil, time.Now()
			return err
		}
		var prevs []*client.KeyValue
		if r.PrevKv {
			var err error
			if prevs, err = ss.prevKVs(ctx, ready); err != nil {
				cw.Close()
				cancelWith(toStatus(err).Error(), 0)
				return
			}
		}
		for i, c := range ready {
			var prev *client.KeyValue
			if prevs != nil {
				prev = prevs[i]
			}
			e, err := ss.event(c, prev)
			if err != nil {
				cw.Close()
				cancelWith(toStatus(err).Error(), 0)
				return
			}
			if (e.Type == mvccpb.PUT && !noPut) || (e.Type == mvccpb.DELETE && !noDelete) {
				events = append(events, e)
			}
			if len(events) >= watchEventsPerResponseMax && (i+1 == len(ready) || ready[i+1].Ts != c.Ts) {
				if flush() != nil {
					return
				}
			}
		}
		if flush() != nil {
			return
		}
		held = append(held[:0], held[n:]...)
		ss.mu.Lock()
		wt.resolved = int64(ev.Resolved)
		ss.mu.Unlock()
		if r.ProgressNotify && time.Since(lastSent) >= ss.s.opts.ProgressInterval {
			if ss.send(&pb.WatchResponse{Header: ss.s.header(int64(ev.Resolved)), WatchId: wt.id}) != nil {
				return
			}
			lastSent = time.Now()
		}
	}
	err := cw.Err()
	if ctx.Err() != nil {
		return // cancelled by the client, or the stream ended
	}
	var ce *client.CompactedError
	if errors.As(err, &ce) {
		cancelWith("etcdserver: mvcc: required revision has been compacted", int64(ce.GCThreshold))
		return
	}
	cancelWith(fmt.Sprintf("etcdapi: watch ended: %v", err), 0)
}

// errStopping ends a Watch stream whose node is stopping.
var errStopping = status.Error(codes.Unavailable, "etcdapi: node stopping")

// watchPrevReadsParallel bounds the reads of previous values (prev_kv)
// one watch has in flight at once.
const watchPrevReadsParallel = 16

// prevKVs finds, for each change of ready (sorted by commit timestamp),
// the key's previous value (prev_kv): nil if the key had none or was
// deleted. A key changed earlier in ready takes that change: the watch
// delivers every change of its span, so the nearest earlier change of a
// key in ready is its previous version. The others are read at their
// change's timestamp minus one, up to watchPrevReadsParallel at once.
func (ss *watchSession) prevKVs(ctx context.Context, ready []client.WatchEvent) ([]*client.KeyValue, error) {
	prevs := make([]*client.KeyValue, len(ready))
	last := make(map[string]int, len(ready))
	var reads []int
	for i, c := range ready {
		if j, ok := last[string(c.Key)]; ok {
			if p := ready[j]; !p.Deleted {
				prevs[i] = &client.KeyValue{Key: p.Key, Value: p.Value, Ts: p.Ts}
			}
		} else {
			reads = append(reads, i)
		}
		last[string(c.Key)] = i
	}
	if len(reads) == 0 {
		return prevs, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	sem := make(chan struct{}, watchPrevReadsParallel)
	for _, i := range reads {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			c := ready[i]
			kvs, err := ss.db.ScanAt(ctx, c.Key, append(bytes.Clone(c.Key), 0), c.Ts-1, 1)
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
					cancel()
				}
				mu.Unlock()
				return
			}
			if len(kvs) == 1 {
				prevs[i] = &kvs[0]
			}
		}(i)
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return prevs, nil
}

// event turns a change of the data keyspace into etcd's event, with prev
// (if not nil) as its previous value (prev_kv).
func (ss *watchSession) event(c client.WatchEvent, prev *client.KeyValue) (*mvccpb.Event, error) {
	if !bytes.HasPrefix(c.Key, dataPrefix) {
		return nil, errCorrupt
	}
	k := bytes.Clone(c.Key[len(dataPrefix):])
	e := &mvccpb.Event{Type: mvccpb.PUT}
	if c.Deleted {
		e.Type = mvccpb.DELETE
		e.Kv = &mvccpb.KeyValue{Key: k, ModRevision: int64(c.Ts)}
	} else {
		x := &txnExec{pending: map[*mvccpb.KeyValue]struct{}{}}
		kv, err := x.decode(client.KeyValue{Key: c.Key, Value: c.Value, Ts: c.Ts})
		if err != nil {
			return nil, err
		}
		e.Kv = kv
	}
	if prev != nil {
		x := &txnExec{pending: map[*mvccpb.KeyValue]struct{}{}}
		var err error
		if e.PrevKv, err = x.decode(*prev); err != nil {
			return nil, err
		}
	}
	return e, nil
}
