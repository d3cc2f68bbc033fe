package concurrency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Span is a set of keys: the single key Key when EndKey is empty, otherwise
// the keys k with Key <= k < EndKey (bytes.Compare order).
type Span struct {
	Key, EndKey []byte
}

// isPoint reports whether s is the single key s.Key.
func (s Span) isPoint() bool { return len(s.EndKey) == 0 }

// valid reports whether s is a single key or a non-empty [Key, EndKey).
func (s Span) valid() bool { return s.isPoint() || bytes.Compare(s.Key, s.EndKey) < 0 }

// String prints a point span as its key and a range as [Key,EndKey).
func (s Span) String() string {
	if s.isPoint() {
		return keyString(s.Key)
	}
	return "[" + keyString(s.Key) + "," + keyString(s.EndKey) + ")"
}

// ErrInvalidSpan marks a span whose EndKey is not empty and not above its
// Key. Acquire returns it (wrapped); Sequence panics on it.
var ErrInvalidSpan = errors.New("concurrency: invalid span")

// Access is how a request uses a span. The zero value is invalid, so that a
// forgotten field is caught rather than read as the weaker Read.
type Access int

const (
	// Read latches are compatible with each other.
	Read Access = iota + 1
	// Write latches conflict with every overlapping latch.
	Write
)

func (a Access) String() string {
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "Access(" + strconv.Itoa(int(a)) + ")"
}

// short is the one-letter form used in dumps and in test scripts.
func (a Access) short() string {
	if a == Write {
		return "w"
	}
	return "r"
}

// LatchSpan is one span a request declares, with its access.
type LatchSpan struct {
	Span
	Access Access
}

func latchesConflict(a, b Access) bool { return a == Write || b == Write }

// LatchManager serializes requests whose declared spans conflict: two
// requests conflict when one writes a key span the other reads or writes.
// A leaseholder keeps one per range and holds a request's latches from
// before it evaluates until its result has applied (see doc.go).
//
// # Fairness
//
// Every request gets a sequence number when it is sequenced, and its
// latches are inserted at once, all spans together, at that moment. It then
// waits for every conflicting latch that was already present, and only for
// those: latches inserted later belong to later requests, which wait for it
// instead. So a writer that arrives behind a stream of readers waits only
// for the readers that came first; the readers behind it wait for it
// (first come, first served; no starvation). The waits-for relation
// follows sequence numbers downwards, so latches cannot deadlock.
//
// A request records all the earlier conflicting latches, not only the
// newest: if an earlier request gives up (its context ends) its latches
// vanish before the ones it waited for, and a later request must still
// wait for those. The request keeps only their done channels, not the
// guards, so that a chain of requests on a hot key does not keep every
// earlier guard reachable.
//
// # Data structures and cost
//
// Point spans dominate (a Get, a Put), so point latches live in a hash map
// from key to the latches at that key; the same entries are linked into a
// skip list in key order, which range spans use to find the point latches
// inside them. Range latches (scans, deletes of a span) are rare and are
// kept in one unordered slice. With P keys latched, R range latches and L
// latches at the requested key, sequencing costs:
//
//   - a point span: one map lookup, plus O(L) if it writes or if a writer
//     holds that key, plus O(R) unless it reads and no range latch writes;
//   - a range span: O(log P) to seek, plus the point latches inside it,
//     plus O(R).
//
// Releasing costs O(L) per point latch (plus O(log P) when the key's last
// latch goes) and O(1) per range latch. One mutex guards everything; the
// critical sections are short and never block.
//
// Rejected alternatives: one slice of all latches scanned on every acquire
// (the first latchSet in internal/kvserver): O(all latches) per request,
// which a hot range cannot afford. A sorted slice of point keys: simpler,
// but O(P) memory moves per new key. An interval B-tree over all spans
// (CockroachDB's spanlatch manager): the best asymptotics for many range
// latches, but far more code, and no B-tree is among our dependencies. If
// scans come to dominate, the range slice is the part to replace (with an
// interval tree keyed by start and augmented by the maximum end key).
//
// # Limits
//
// The manager holds at most the declared spans of the requests in flight.
// It has no limit of its own: the server bounds the requests it admits,
// and a request's declared spans are bounded by its batch size.
//
// # Lock order
//
// LatchManager.mu is a leaf: nothing else is locked while it is held. It is
// unrelated to the lock table's mutexes; a request must not wait in a lock
// table queue while it holds latches (see doc.go).
type LatchManager struct {
	// seed hashes point keys to skip list heights. It is random per manager
	// so that crafted keys cannot flatten the list; it affects only speed,
	// never which latches conflict.
	seed maphash.Seed

	mu struct {
		sync.Mutex
		// seq is the last sequence number handed out; 0 is never used.
		seq uint64
		// points maps a key to the point latches at that key.
		// Invariant: every node in points is in index, and vice versa;
		// no node has zero latches.
		points map[string]*pointNode
		// index orders the nodes of points by key.
		index skipList
		// ranges holds the range latches in no particular order.
		// Invariant: ranges[i].idx == i.
		ranges []*rangeLatch
		// rangeWrites counts the write latches in ranges.
		rangeWrites int
		// latchCount is the number of latches (spans) in points and ranges.
		latchCount int
	}
}

// pointNode is the set of point latches at one key, and the key's node in
// the skip list.
type pointNode struct {
	key     string
	latches []pointLatch
	// writes counts the write latches in latches.
	writes int
	// next[i] is the next node at level i; len(next) is the node's height.
	next []*pointNode
	// The buffers hold latches and next for the common case (one latch;
	// height at most 2, 15 nodes in 16), saving two allocations.
	latchesBuf [1]pointLatch
	nextBuf    [2]*pointNode
}

type pointLatch struct {
	g      *LatchGuard
	access Access
}

type rangeLatch struct {
	g      *LatchGuard
	span   Span
	access Access
	// idx is the latch's index in LatchManager.mu.ranges.
	idx int
}

// LatchGuard is a request's set of latches, from Sequence (or Acquire)
// until Release.
type LatchGuard struct {
	m     *LatchManager
	seq   uint64
	spans []LatchSpan
	// waitFor holds the done channels of the earlier guards with a
	// conflicting latch, one per guard. Written by Sequence, read-only
	// afterwards.
	waitFor []<-chan struct{}

	// The fields below are guarded by m.mu.

	// done is closed by Release. It is made only when a later guard must
	// wait for this one, so that an uncontended request allocates no
	// channel.
	done     chan struct{}
	released bool
	// mark is the sequence number of the last guard whose Sequence counted
	// this one as a conflict; it makes each guard count once.
	mark uint64
	// points and ranges are this guard's latches, for Release.
	points []pointRef
	ranges []*rangeLatch
	// pointsBuf holds points for a request with one point span.
	pointsBuf [1]pointRef
}

type pointRef struct {
	node   *pointNode
	access Access
}

// NewLatchManager returns an empty latch manager.
func NewLatchManager() *LatchManager {
	m := &LatchManager{seed: maphash.MakeSeed()}
	m.mu.points = make(map[string]*pointNode)
	m.mu.index.init()
	return m
}

// Acquire sequences the request's spans and waits until every conflicting
// latch sequenced before it has been released. If ctx ends first, it
// releases the request's own latches and returns an error wrapping
// ctx.Err(). A span with a non-empty EndKey not above its Key is an error
// wrapping ErrInvalidSpan. The caller must Release the guard.
func (m *LatchManager) Acquire(ctx context.Context, spans []LatchSpan) (*LatchGuard, error) {
	for _, s := range spans {
		if err := checkLatchSpan(s); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("concurrency: acquiring latches: %w", err)
	}
	g := m.Sequence(spans)
	if err := g.Wait(ctx); err != nil {
		m.Release(g)
		return nil, err
	}
	return g, nil
}

func checkLatchSpan(s LatchSpan) error {
	if !s.valid() {
		return fmt.Errorf("%w: %s", ErrInvalidSpan, s.Span)
	}
	if s.Access != Read && s.Access != Write {
		return fmt.Errorf("%w: access %v", ErrInvalidSpan, s.Access)
	}
	return nil
}

// Sequence inserts the request's latches and records the conflicting
// latches sequenced before it; it never blocks. Use Ready or Wait to learn
// when they are gone, and Release in every case. It panics on an invalid
// span (see Acquire). The manager keeps the spans' byte slices until
// Release; the caller must not modify them.
func (m *LatchManager) Sequence(spans []LatchSpan) *LatchGuard {
	for _, s := range spans {
		if err := checkLatchSpan(s); err != nil {
			panic(err)
		}
	}
	g := &LatchGuard{m: m, spans: spans}
	g.points = g.pointsBuf[:0]
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.seq++
	g.seq = m.mu.seq
	// All conflicts first, then all inserts: a request never waits for
	// itself, even when its own spans overlap.
	for _, s := range spans {
		m.collectConflictsLocked(g, s)
	}
	for _, s := range spans {
		m.insertLocked(g, s)
	}
	return g
}

func (m *LatchManager) addConflictLocked(g, other *LatchGuard) {
	if other.mark == g.seq {
		return
	}
	other.mark = g.seq
	if other.done == nil {
		other.done = make(chan struct{})
	}
	g.waitFor = append(g.waitFor, other.done)
}

func (m *LatchManager) collectConflictsLocked(g *LatchGuard, s LatchSpan) {
	if s.isPoint() {
		if n := m.mu.points[string(s.Key)]; n != nil && (s.Access == Write || n.writes > 0) {
			for _, l := range n.latches {
				if latchesConflict(s.Access, l.access) {
					m.addConflictLocked(g, l.g)
				}
			}
		}
	} else {
		end := string(s.EndKey)
		for n := m.mu.index.seekGE(string(s.Key)); n != nil && n.key < end; n = n.next[0] {
			if s.Access == Read && n.writes == 0 {
				continue
			}
			for _, l := range n.latches {
				if latchesConflict(s.Access, l.access) {
					m.addConflictLocked(g, l.g)
				}
			}
		}
	}
	if s.Access == Read && m.mu.rangeWrites == 0 {
		return
	}
	for _, r := range m.mu.ranges {
		if latchesConflict(s.Access, r.access) && overlaps(s.Span, r.span) {
			m.addConflictLocked(g, r.g)
		}
	}
}

// overlaps reports whether two valid spans share a key; b is a range.
func overlaps(a, b Span) bool {
	if a.isPoint() {
		return bytes.Compare(b.Key, a.Key) <= 0 && bytes.Compare(a.Key, b.EndKey) < 0
	}
	return bytes.Compare(a.Key, b.EndKey) < 0 && bytes.Compare(b.Key, a.EndKey) < 0
}

func (m *LatchManager) insertLocked(g *LatchGuard, s LatchSpan) {
	m.mu.latchCount++
	if s.isPoint() {
		n := m.mu.points[string(s.Key)]
		if n == nil {
			key := string(s.Key)
			n = &pointNode{key: key}
			n.latches = n.latchesBuf[:0]
			if h := m.height(key); h <= len(n.nextBuf) {
				n.next = n.nextBuf[:h]
			} else {
				n.next = make([]*pointNode, h)
			}
			m.mu.points[key] = n
			m.mu.index.insert(n)
		}
		n.latches = append(n.latches, pointLatch{g: g, access: s.Access})
		if s.Access == Write {
			n.writes++
		}
		g.points = append(g.points, pointRef{node: n, access: s.Access})
		return
	}
	r := &rangeLatch{g: g, span: s.Span, access: s.Access, idx: len(m.mu.ranges)}
	m.mu.ranges = append(m.mu.ranges, r)
	if s.Access == Write {
		m.mu.rangeWrites++
	}
	g.ranges = append(g.ranges, r)
}

// height draws a skip list height from the key's hash: 1 + (trailing zero
// bits)/2, so each level holds about a quarter of the one below.
func (m *LatchManager) height(key string) int {
	h := maphash.String(m.seed, key)
	return min(1+bits.TrailingZeros64(h)/2, skipHeightMax)
}

// Release removes the guard's latches and lets the requests waiting for
// them go on. It is idempotent, and a nil guard is ignored.
func (m *LatchManager) Release(g *LatchGuard) {
	if g == nil {
		return
	}
	if g.m != m {
		panic("concurrency: LatchGuard released on another LatchManager")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if g.released {
		return
	}
	g.released = true
	for _, p := range g.points {
		n := p.node
		i := slices.IndexFunc(n.latches, func(l pointLatch) bool { return l.g == g && l.access == p.access })
		if i < 0 {
			panic("concurrency: latch missing from its key at Release")
		}
		last := len(n.latches) - 1
		n.latches[i] = n.latches[last]
		n.latches[last] = pointLatch{}
		n.latches = n.latches[:last]
		if p.access == Write {
			n.writes--
		}
		if len(n.latches) == 0 {
			delete(m.mu.points, n.key)
			m.mu.index.remove(n)
		}
	}
	for _, r := range g.ranges {
		last := len(m.mu.ranges) - 1
		if m.mu.ranges[r.idx] != r {
			panic("concurrency: range latch index broken at Release")
		}
		m.mu.ranges[r.idx] = m.mu.ranges[last]
		m.mu.ranges[r.idx].idx = r.idx
		m.mu.ranges[last] = nil
		m.mu.ranges = m.mu.ranges[:last]
		if r.access == Write {
			m.mu.rangeWrites--
		}
	}
	m.mu.latchCount -= len(g.points) + len(g.ranges)
	g.points, g.ranges = nil, nil
	if g.done != nil {
		close(g.done)
	}
}

// Len returns the number of latches (declared spans) held or waiting.
func (m *LatchManager) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.latchCount
}

// Ready reports whether every latch the guard waits for has been released.
func (g *LatchGuard) Ready() bool {
	for _, c := range g.waitFor {
		select {
		case <-c:
		default:
			return false
		}
	}
	return true
}

// Wait blocks until Ready, or until ctx ends; then it returns an error
// wrapping ctx.Err(), and the guard still holds its latches (Release it).
func (g *LatchGuard) Wait(ctx context.Context) error {
	for _, c := range g.waitFor {
		select {
		case <-c:
			continue
		default:
		}
		select {
		case <-c:
		case <-ctx.Done():
			return fmt.Errorf("concurrency: waiting for latches: %w", ctx.Err())
		}
	}
	return nil
}

// Spans returns the spans the guard was sequenced with.
func (g *LatchGuard) Spans() []LatchSpan { return g.spans }

// String dumps the latches, deterministically: point latches in key order,
// then range latches by start key; each latch as access@sequence, in
// sequence order.
func (m *LatchManager) String() string {
	return m.format(func(seq uint64) string { return strconv.FormatUint(seq, 10) })
}

// format is String with a caller-chosen name for each sequence number.
func (m *LatchManager) format(name func(seq uint64) string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	type entry struct {
		seq    uint64
		access Access
	}
	writeEntries := func(es []entry) {
		slices.SortFunc(es, func(x, y entry) int { return compareUint64(x.seq, y.seq) })
		for i, e := range es {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(e.access.short() + "@" + name(e.seq))
		}
		b.WriteByte('\n')
	}
	for n := m.mu.index.first(); n != nil; n = n.next[0] {
		b.WriteString(keyString([]byte(n.key)) + ": ")
		es := make([]entry, 0, len(n.latches))
		for _, l := range n.latches {
			es = append(es, entry{l.g.seq, l.access})
		}
		writeEntries(es)
	}
	rs := slices.Clone(m.mu.ranges)
	slices.SortFunc(rs, func(x, y *rangeLatch) int {
		if c := bytes.Compare(x.span.Key, y.span.Key); c != 0 {
			return c
		}
		if c := bytes.Compare(x.span.EndKey, y.span.EndKey); c != 0 {
			return c
		}
		return compareUint64(x.g.seq, y.g.seq)
	})
	for i := 0; i < len(rs); {
		j := i
		var es []entry
		for ; j < len(rs) && bytes.Equal(rs[j].span.Key, rs[i].span.Key) && bytes.Equal(rs[j].span.EndKey, rs[i].span.EndKey); j++ {
			es = append(es, entry{rs[j].g.seq, rs[j].access})
		}
		b.WriteString(rs[i].span.String() + ": ")
		writeEntries(es)
		i = j
	}
	if b.Len() == 0 {
		return "(no latches)\n"
	}
	return b.String()
}

func compareUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// keyString prints a key as is when it is printable ASCII without spaces,
// and quoted otherwise.
func keyString(k []byte) string {
	for _, c := range k {
		if c <= ' ' || c > '~' || c == '"' || c == ',' || c == '[' || c == ')' {
			return strconv.Quote(string(k))
		}
	}
	if len(k) == 0 {
		return `""`
	}
	return string(k)
}

// skipHeightMax bounds a skip list node's height. With a quarter of the
// nodes on each level, 16 levels serve 4^16 keys at O(log) cost.
const skipHeightMax = 16

// skipList is an ordered set of pointNodes by key. Heights come from the
// caller (a hash of the key), so the list draws no random numbers.
type skipList struct {
	head pointNode
}

func (s *skipList) init() { s.head.next = make([]*pointNode, skipHeightMax) }

func (s *skipList) first() *pointNode { return s.head.next[0] }

// seekGE returns the first node with a key >= key, or nil.
func (s *skipList) seekGE(key string) *pointNode {
	x := &s.head
	for lvl := skipHeightMax - 1; lvl >= 0; lvl-- {
		for x.next[lvl] != nil && x.next[lvl].key < key {
			x = x.next[lvl]
		}
	}
	return x.next[0]
}

// preds fills p[lvl] with the last node at each level whose key is < key.
func (s *skipList) preds(key string, p *[skipHeightMax]*pointNode) {
	x := &s.head
	for lvl := skipHeightMax - 1; lvl >= 0; lvl-- {
		for x.next[lvl] != nil && x.next[lvl].key < key {
			x = x.next[lvl]
		}
		p[lvl] = x
	}
}

// insert links n, whose key must not be in the list yet.
func (s *skipList) insert(n *pointNode) {
	var p [skipHeightMax]*pointNode
	s.preds(n.key, &p)
	if nx := p[0].next[0]; nx != nil && nx.key == n.key {
		panic("concurrency: duplicate key in latch skip list")
	}
	for lvl := range n.next {
		n.next[lvl] = p[lvl].next[lvl]
		p[lvl].next[lvl] = n
	}
}

// remove unlinks n, which must be in the list.
func (s *skipList) remove(n *pointNode) {
	var p [skipHeightMax]*pointNode
	s.preds(n.key, &p)
	if p[0].next[0] != n {
		panic("concurrency: latch skip list lost a key")
	}
	for lvl := range n.next {
		p[lvl].next[lvl] = n.next[lvl]
		n.next[lvl] = nil
	}
}
