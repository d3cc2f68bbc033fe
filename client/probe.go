package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Probing a node that does not answer (issue 13, item 7).
//
// One attempt of a request may wait up to Options.RPCTimeout (10 s): a
// write can be slow for good reasons (latches held by other writes, a
// loaded disk), and cutting it short makes it ambiguous. But a node that
// is stopped (SIGSTOP), or cut off from the client, never answers, and its
// requests waited the whole timeout while the range had another leader
// within an election timeout. So while an attempt runs past
// Options.ProbeAfter, the client asks the same node, on the same
// connection, for its gRPC health (grpc.health.v1, which every node
// serves, with no certificate needed) every ProbeAfter: an answer of any
// kind means the node is up and the attempt goes on; no answer within
// Options.ProbeTimeout cancels the attempt as a transport failure with no
// answer (errNodeSilent), and the routing loop tries the range's other
// replicas. A stopped node is thus given up after about ProbeAfter +
// ProbeTimeout instead of RPCTimeout.
//
// A node found silent becomes a suspect, for every request of the DB, not
// only the one whose attempt it failed: requests try the range's other
// replicas first, and do not follow a hint naming it (the others still
// name it as leaseholder until they elect another, a few election
// timeouts; following that hint made each request of a transaction wait
// for its own probe). The DB probes a suspect every SuspectProbeInterval
// and clears it at the first answer, so a resumed node is used again at
// once. An attempt already waiting on a node when another request finds it
// silent is ended then too, as its own probe would end it a little later:
// so every request gives up on a stopped node at the first detection, not
// each ProbeAfter + ProbeTimeout after its own start (the pauses' "fault
// to first success" in docs/RELIABILITY.md).
//
// ProbeTimeout is the cluster's election timeout unless set (timing.go):
// the deadline is the probe's, not the attempt's. Rejected: a per-attempt
// deadline of about an election timeout. It would give up on slow but live
// leaseholders too, turning slow writes into ambiguous ones.

// errNodeSilent: the node did not answer a health probe during an attempt.
var errNodeSilent = errors.New("the node did not answer a health probe")

// probe watches the attempt running on addr under actx: once it has run
// ProbeAfter, and every ProbeAfter after, it probes addr; a probe with no
// answer within ProbeTimeout cancels the attempt (cancel) and sets silent.
// The returned stop ends the watch; call it when the attempt returns.
//
// The attempt is also ended, as silent, if node id (0: unknown) becomes a
// suspect while it runs (another request's probe found it silent). An
// attempt sent to a node that is already a suspect (every replica was
// out of reach) is left to its own probe.
func (s *sender) probe(actx context.Context, cancel context.CancelFunc, id uint64, addr string, silent *atomic.Bool) (stop func()) {
	if s.opts.ProbeAfter <= 0 {
		return func() {}
	}
	suspected := s.suspects.watch(id)
	done := make(chan struct{})
	go func() {
		t := time.NewTimer(s.opts.ProbeAfter)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-actx.Done():
				return
			case <-suspected:
				silent.Store(true)
				cancel()
				return
			case <-t.C:
			}
			conn, err := s.nodes.conn(addr)
			if err != nil {
				return
			}
			pctx, pcancel := context.WithTimeout(actx, s.timing.probe())
			_, err = healthpb.NewHealthClient(conn).Check(pctx, &healthpb.HealthCheckRequest{})
			timedOut := pctx.Err() != nil && actx.Err() == nil
			pcancel()
			if err != nil && timedOut {
				silent.Store(true)
				cancel()
				return
			}
			t.Reset(s.opts.ProbeAfter)
		}
	}()
	return func() { close(done) }
}

// SuspectProbeInterval is how often a suspect node is probed.
const SuspectProbeInterval = 200 * time.Millisecond

// suspectSet is the set of suspect nodes (by node ID).
type suspectSet struct {
	mu sync.Mutex
	m  map[uint64]bool
	// next[id] is closed when id next becomes a suspect (watch). Invariant:
	// a channel in next is open.
	next map[uint64]chan struct{}
}

// watch returns a channel closed when id next becomes a suspect (not
// already one: an attempt sent to a suspect waits for its own probe); nil
// (never closed) for id 0.
func (ss *suspectSet) watch(id uint64) <-chan struct{} {
	if id == 0 {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.next == nil {
		ss.next = map[uint64]chan struct{}{}
	}
	ch, ok := ss.next[id]
	if !ok {
		ch = make(chan struct{})
		ss.next[id] = ch
	}
	return ch
}

func (ss *suspectSet) has(id uint64) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.m[id]
}

// add adds id and reports whether it was new.
func (ss *suspectSet) add(id uint64) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.m == nil {
		ss.m = map[uint64]bool{}
	}
	if ss.m[id] {
		return false
	}
	ss.m[id] = true
	if ch, ok := ss.next[id]; ok {
		close(ch)
		delete(ss.next, id)
	}
	return true
}

func (ss *suspectSet) remove(id uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, id)
}

// suspect makes node id, at addr, a suspect until a probe of it is
// answered (or the DB closes).
func (s *sender) suspect(id uint64, addr string) {
	if s.ctx == nil || !s.suspects.add(id) {
		return
	}
	go func() {
		defer s.suspects.remove(id)
		t := time.NewTicker(SuspectProbeInterval)
		defer t.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-t.C:
			}
			conn, err := s.nodes.conn(addr)
			if err != nil {
				return
			}
			pctx, cancel := context.WithTimeout(s.ctx, s.timing.probe())
			_, err = healthpb.NewHealthClient(conn).Check(pctx, &healthpb.HealthCheckRequest{})
			timedOut := pctx.Err() != nil
			cancel()
			if err == nil || !timedOut {
				return // an answer: the node is up
			}
		}
	}()
}
