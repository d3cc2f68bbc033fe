package kvserver

import (
	"bytes"
	"context"
	"sync"
)

// latchSet holds the keys of in-flight non-transactional writes on a
// range's leaseholder. A Put holds its key from before it takes its
// timestamp until it has applied; a read (or another Put) that overlaps
// waits. This is what makes a Put's timestamp safe to assign before the
// write lands: every read that could have missed it started earlier and so
// read at a lower timestamp.
//
// Rejected alternative: a timestamp cache of reads (CockroachDB's), which
// would push writes above reads; it needs more state for the same effect
// in a store whose reads already wait for ReadIndex.
type latchSet struct {
	mu   sync.Mutex
	held []*latch
}

type latch struct {
	key  []byte
	done chan struct{}
}

// acquire waits for overlapping latches, then holds one on each key. The
// returned function releases them.
func (s *latchSet) acquire(ctx context.Context, ks [][]byte) (func(), error) {
	for {
		s.mu.Lock()
		var wait chan struct{}
		for _, l := range s.held {
			for _, k := range ks {
				if bytes.Equal(l.key, k) {
					wait = l.done
				}
			}
		}
		if wait == nil {
			mine := make([]*latch, 0, len(ks))
			for _, k := range ks {
				l := &latch{key: k, done: make(chan struct{})}
				mine = append(mine, l)
				s.held = append(s.held, l)
			}
			s.mu.Unlock()
			return func() { s.release(mine) }, nil
		}
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *latchSet) release(ls []*latch) {
	s.mu.Lock()
	kept := s.held[:0]
	for _, h := range s.held {
		mine := false
		for _, l := range ls {
			if h == l {
				mine = true
			}
		}
		if !mine {
			kept = append(kept, h)
		}
	}
	s.held = kept
	s.mu.Unlock()
	for _, l := range ls {
		close(l.done)
	}
}

// waitSpan waits until no latch is held on a key in [start, end) (end
// empty: the key start).
func (s *latchSet) waitSpan(ctx context.Context, start, end []byte) error {
	for {
		s.mu.Lock()
		var wait chan struct{}
		for _, l := range s.held {
			if (len(end) == 0 && bytes.Equal(l.key, start)) ||
				(len(end) > 0 && bytes.Compare(l.key, start) >= 0 && bytes.Compare(l.key, end) < 0) {
				wait = l.done
				break
			}
		}
		s.mu.Unlock()
		if wait == nil {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
