package concurrency

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// TxnID identifies a transaction: in Canopy, its start_ts. A larger ID is a
// younger transaction. 0 marks a non-transactional request, which may wait
// for locks but never holds one.
type TxnID uint64

// Strength is the mode of a lock. The zero value is invalid.
type Strength int

const (
	// Shared locks are compatible with each other (read locks of the 2PC
	// baseline).
	Shared Strength = iota + 1
	// Exclusive locks conflict with every lock of another transaction
	// (intents).
	Exclusive
)

func (s Strength) String() string {
	switch s {
	case Shared:
		return "shared"
	case Exclusive:
		return "exclusive"
	}
	return "Strength(" + strconv.Itoa(int(s)) + ")"
}

func (s Strength) valid() bool { return s == Shared || s == Exclusive }

func locksConflict(a, b Strength) bool { return a == Exclusive || b == Exclusive }

var (
	// ErrDeadlock completes the waiter of a transaction chosen as the
	// victim of a deadlock: the transaction must abort (and may retry).
	ErrDeadlock = errors.New("concurrency: deadlock: the transaction was chosen as victim and must abort")
	// ErrCleared completes every waiter when the table is cleared (the
	// replica lost its lease): retry at the new leaseholder. Waiter.Err
	// returns an error wrapping both ErrCleared and Clear's reason.
	ErrCleared = errors.New("concurrency: lock table cleared")
	// ErrDequeued completes a waiter that was removed before it was woken:
	// by Dequeue, by Wait when its context ended, or by ReleaseTxn.
	ErrDequeued = errors.New("concurrency: waiter dequeued")
	// ErrLockTableFull is returned by Acquire when the table tracks
	// Config.LocksMax keys and the key is not among them.
	ErrLockTableFull = errors.New("concurrency: lock table full")
	// ErrTooManyWaiters is returned by Enqueue when Config.WaitersMax
	// waiters are queued.
	ErrTooManyWaiters = errors.New("concurrency: too many waiters")
)

// ConflictError is returned by Acquire when other transactions hold a
// conflicting lock on Key: the caller must Enqueue and wait first.
type ConflictError struct {
	Key []byte
	// Holders are the transactions whose locks conflict, in ID order.
	Holders []TxnID
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("concurrency: lock on %s held by %v", keyString(e.Key), e.Holders)
}

const (
	// LocksMaxDefault is Config.LocksMax when it is zero.
	LocksMaxDefault = 100_000
	// WaitersMaxDefault is Config.WaitersMax when it is zero.
	WaitersMaxDefault = 10_000
)

// Config configures a LockTable. The zero value means the defaults.
type Config struct {
	// LocksMax bounds the number of keys the table tracks (with holders,
	// claims or waiters). Past it Acquire returns ErrLockTableFull and
	// AddDiscovered forgets the lock (the caller rediscovers it in storage
	// at its next evaluation). Memory: about 200 bytes per key plus the key.
	LocksMax int
	// WaitersMax bounds the number of queued waiters; past it Enqueue
	// returns ErrTooManyWaiters. Deadlock detection costs up to O(waiters)
	// per Enqueue, so this also bounds its cost.
	WaitersMax int
	// Detector is the waits-for graph; LockTables that share one find
	// deadlocks across them (all the ranges of a node). nil means a private
	// one.
	Detector *Detector
}

// withDefaults returns c with zero fields set to their defaults, or an
// error for settings that make no sense.
func (c Config) withDefaults() (Config, error) {
	if c.LocksMax < 0 || c.WaitersMax < 0 {
		return c, fmt.Errorf("concurrency: negative limit in Config %+v", c)
	}
	if c.LocksMax == 0 {
		c.LocksMax = LocksMaxDefault
	}
	if c.WaitersMax == 0 {
		c.WaitersMax = WaitersMaxDefault
	}
	if c.Detector == nil {
		c.Detector = NewDetector()
	}
	return c, nil
}

// LockTable records the locks transactions hold on a range's keys and
// queues the requests that wait for them. It mirrors the intents in
// storage (and the shared locks of the 2PC baseline, which live only
// here): writing an intent is what takes the lock, and Acquire records it.
//
// # Queues, wake-ups and fairness
//
// Each key has holders (transactions with a lock, pairwise compatible),
// claims and a FIFO queue of waiters. A waiter is woken when it reaches the
// head of the queue and its strength is compatible with every holder and
// claim of another transaction. Waking goes on down the queue while the
// next waiter is compatible too: all the leading shared waiters are woken
// together, but at most one exclusive waiter, since the claim it takes
// conflicts with all that follow. Nobody else is woken: no thundering herd.
//
// A woken waiter does not get the lock: the lock is its intent, which it
// writes only after re-evaluating. Until then it holds a claim, at its
// strength, that later requests respect exactly like a lock: Enqueue
// queues a newcomer behind a conflicting claim, and behind any queued
// waiter at all (so a stream of shared requests cannot overtake a queued
// exclusive one). A claim ends when its transaction Acquires the key (the
// claim becomes the lock), when the waiter is Dequeued (it re-evaluated and
// needs no lock, or gave up), or with Release/ReleaseTxn. So every waiter
// reaches the head of its queue in order and keeps its turn until it is
// done: no starvation, as long as holders eventually release. The rejected
// alternative, waking waiters with nothing reserved, lets a newcomer
// take the lock between the wake-up and the re-evaluation, any number of
// times. Non-transactional waiters get no claim (they hold nothing, so
// they must stay out of the waits-for graph); waking continues past them.
//
// A transaction that already holds or claims the key at the requested
// strength never waits. One that holds it shared and asks for exclusive
// (an upgrade) queues ahead of every other waiter but earlier upgraders:
// the waiters behind it wait for its shared lock anyway, so queuing it
// behind them would be a certain deadlock.
//
// Acquire checks only holders, not claims or queues: it records an intent
// that was written, which is a lock whether or not it was fair. Fairness
// is enforced by Enqueue, which callers go through before they evaluate.
//
// # Deadlocks
//
// Every queued transactional waiter has edges in the Detector's waits-for
// graph, to the transactions it waits for (see blockersLocked). Whenever
// edges are added the detector looks for a cycle through them; the
// youngest transaction (largest TxnID) on the cycle is the victim, and all
// its queued waiters complete with ErrDeadlock. The graph therefore stays
// acyclic.
//
// # Lock order
//
// LockTable.mu before Detector.mu, never the reverse, and never two
// LockTable mutexes at once: a victim's waiter in another table is
// completed after this table's mutex is released.
//
// The table starts no goroutine and reads no clock: waiting is bounded by
// the caller's context.
type LockTable struct {
	cfg Config // immutable after NewLockTable
	det *Detector

	mu struct {
		sync.Mutex
		// locks maps a key to its state. Invariant: no state is empty
		// (every one has a holder, a claim or a waiter); len(locks) <=
		// cfg.LocksMax.
		locks map[string]*lockState
		// txns indexes the locks and waiters of each transaction.
		txns map[TxnID]*txnRecord
		// waiterCount is the number of queued waiters. Invariant: it is
		// the sum of len(queue) over locks, and <= cfg.WaitersMax.
		waiterCount int
		// waiterSeq numbers waiters in Enqueue order.
		waiterSeq uint64
		// dirty lists the keys whose holders, claims or queue changed
		// during the current operation; flushLocked settles them.
		dirty []*lockState
		// changed lists waiters whose blockers changed, for the detector.
		changed []*Waiter
	}
}

// lockState is one key's holders, claims and queue.
type lockState struct {
	// key is also the key of LockTable.mu.locks (one copy of the bytes).
	key string
	// holders is sorted by txn. Invariant: pairwise compatible; no txn is 0
	// or appears twice.
	holders []lockHolder
	// claims are the woken transactional waiters that have not yet
	// acquired or been dequeued, in wake order.
	claims []*Waiter
	// queue is FIFO except for upgraders, which go first. Invariant
	// (outside an operation): queue[0] conflicts with a holder or claim of
	// another transaction.
	queue []*Waiter
	dirty bool
	// holdersBuf holds holders for the common case of one holder.
	holdersBuf [1]lockHolder
}

type lockHolder struct {
	txn      TxnID
	strength Strength
}

// txnRecord is what one transaction has in the table.
type txnRecord struct {
	// locks are the keys it holds.
	locks map[*lockState]struct{}
	// waiters are its queued or claiming waiters; nil until it has one.
	waiters map[*Waiter]struct{}
}

type waiterState int

const (
	waiterQueued waiterState = iota
	// waiterClaimed: woken, holds a claim (transactional waiters only).
	waiterClaimed
	// waiterFinished: woken without a claim, claim ended, or completed
	// with an error.
	waiterFinished
)

// Waiter is one request waiting in a key's queue. It is single-use: once
// done it never queues again.
type Waiter struct {
	table    *LockTable
	txn      TxnID
	strength Strength
	ls       *lockState
	seq      uint64
	upgrade  bool
	done     chan struct{}

	// The fields below are guarded by table.mu.

	state waiterState
	// err is written before done is closed and read only after.
	err error
	// blockers are the transactions it waits for, sorted; for a
	// non-transactional waiter they stand in for it in the graph.
	blockers []TxnID

	// det is guarded by Detector.mu.
	det struct {
		// edges are the blockers the detector has recorded.
		edges []TxnID
		// registered: the detector lists it among its txn's waiters.
		registered bool
		// doomed: chosen as a deadlock victim; the detector ignores it
		// from then on and its table completes it with ErrDeadlock.
		doomed bool
	}
}

// NewLockTable returns an empty lock table. It panics on a Config with a
// negative limit.
func NewLockTable(cfg Config) *LockTable {
	cfg, err := cfg.withDefaults()
	if err != nil {
		panic(err)
	}
	t := &LockTable{cfg: cfg, det: cfg.Detector}
	t.mu.locks = make(map[string]*lockState)
	t.mu.txns = make(map[TxnID]*txnRecord)
	return t
}

// Done returns a channel closed when the waiter may proceed (the lock was
// released: re-evaluate), was chosen as a deadlock victim, was dequeued,
// or the table was cleared. Err tells which.
func (w *Waiter) Done() <-chan struct{} { return w.done }

// Err returns, once Done is closed, nil (proceed and re-evaluate; then
// Acquire or Dequeue), ErrDeadlock (abort the transaction, retryable), an
// error wrapping ErrCleared (retry elsewhere) or ErrDequeued. Before Done
// is closed it returns nil.
func (w *Waiter) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

// Txn returns the waiting transaction (0: non-transactional).
func (w *Waiter) Txn() TxnID { return w.txn }

// Key returns (a copy of) the key the waiter waits on.
func (w *Waiter) Key() []byte { return []byte(w.ls.key) }

// Strength returns the strength the waiter asked for.
func (w *Waiter) Strength() Strength { return w.strength }

func (t *LockTable) recordLocked(txn TxnID) *txnRecord {
	r := t.mu.txns[txn]
	if r == nil {
		r = &txnRecord{locks: map[*lockState]struct{}{}}
		t.mu.txns[txn] = r
	}
	return r
}

func (t *LockTable) forgetEmptyRecordLocked(txn TxnID) {
	if r := t.mu.txns[txn]; r != nil && len(r.locks) == 0 && len(r.waiters) == 0 {
		delete(t.mu.txns, txn)
	}
}

func (t *LockTable) markDirtyLocked(ls *lockState) {
	if !ls.dirty {
		ls.dirty = true
		t.mu.dirty = append(t.mu.dirty, ls)
	}
}

// heldLocked returns the strongest strength txn holds or claims on ls, or
// 0.
func heldLocked(ls *lockState, txn TxnID) Strength {
	var s Strength
	for _, h := range ls.holders {
		if h.txn == txn {
			s = max(s, h.strength)
		}
	}
	for _, c := range ls.claims {
		if c.txn == txn {
			s = max(s, c.strength)
		}
	}
	return s
}

// grantConflictLocked reports whether a holder or claimant other than txn
// conflicts with strength s.
func grantConflictLocked(ls *lockState, txn TxnID, s Strength) bool {
	for _, h := range ls.holders {
		if h.txn != txn && locksConflict(h.strength, s) {
			return true
		}
	}
	for _, c := range ls.claims {
		if c.txn != txn && locksConflict(c.strength, s) {
			return true
		}
	}
	return false
}

// Acquire records that txn holds a lock of strength s on key (it wrote an
// intent there, or took a shared lock). It returns a *ConflictError if
// another transaction holds a conflicting lock: the caller must Enqueue
// and wait first. A transaction holding the key shared upgrades to
// exclusive if it is the only holder; a lock is never downgraded. If txn
// holds a claim on the key (it was woken), the claim becomes the lock.
// Acquire returns ErrLockTableFull (wrapped) if the key is new and the
// table tracks Config.LocksMax keys. It panics if txn is 0 or s invalid.
func (t *LockTable) Acquire(txn TxnID, key []byte, s Strength) error {
	if txn == 0 {
		panic("concurrency: Acquire by a non-transactional request (TxnID 0)")
	}
	if !s.valid() {
		panic(fmt.Sprintf("concurrency: Acquire with invalid %v", s))
	}
	t.mu.Lock()
	err := t.acquireLocked(txn, key, s)
	foreign := t.flushLocked()
	t.mu.Unlock()
	abortForeign(foreign)
	return err
}

func (t *LockTable) acquireLocked(txn TxnID, key []byte, s Strength) error {
	ls := t.mu.locks[string(key)]
	if ls == nil {
		if len(t.mu.locks) >= t.cfg.LocksMax {
			return fmt.Errorf("%w: %d keys tracked, acquiring %s", ErrLockTableFull, len(t.mu.locks), keyString(key))
		}
		ls = &lockState{key: string(key)}
		ls.holders = ls.holdersBuf[:0]
		t.mu.locks[ls.key] = ls
	}
	var conflicting []TxnID
	for _, h := range ls.holders {
		if h.txn != txn && locksConflict(h.strength, s) {
			conflicting = append(conflicting, h.txn)
		}
	}
	if conflicting != nil {
		return &ConflictError{Key: []byte(ls.key), Holders: conflicting}
	}
	i, found := slices.BinarySearchFunc(ls.holders, txn, func(h lockHolder, x TxnID) int { return compareUint64(uint64(h.txn), uint64(x)) })
	if found {
		ls.holders[i].strength = max(ls.holders[i].strength, s)
	} else {
		ls.holders = slices.Insert(ls.holders, i, lockHolder{txn: txn, strength: s})
		t.recordLocked(txn).locks[ls] = struct{}{}
	}
	t.dropClaimsLocked(ls, txn)
	t.markDirtyLocked(ls)
	return nil
}

// dropClaimsLocked ends txn's claims on ls.
func (t *LockTable) dropClaimsLocked(ls *lockState, txn TxnID) {
	ls.claims = slices.DeleteFunc(ls.claims, func(c *Waiter) bool {
		if c.txn != txn {
			return false
		}
		c.state = waiterFinished
		delete(t.mu.txns[txn].waiters, c)
		return true
	})
}

// AddDiscovered records a lock found in storage (an intent written before
// this table existed: after a restart or a lease change). It is
// idempotent. The lock is not recorded (the caller finds it again at its
// next evaluation) if the table is full, or if it conflicts with a lock the
// table already records for another transaction; in the latter case the
// caller still waits for that one. It panics if holder is 0 or s invalid.
func (t *LockTable) AddDiscovered(holder TxnID, key []byte, s Strength) {
	if holder == 0 {
		panic("concurrency: AddDiscovered with TxnID 0")
	}
	if !s.valid() {
		panic(fmt.Sprintf("concurrency: AddDiscovered with invalid %v", s))
	}
	t.mu.Lock()
	_ = t.acquireLocked(holder, key, s)
	foreign := t.flushLocked()
	t.mu.Unlock()
	abortForeign(foreign)
}

// Enqueue asks whether waiter may go on at key with strength s. It returns
// nil if there is nothing to wait for: no conflicting holder or claim and
// no queue, or waiter already holds or claims the key at s or above.
// Otherwise it queues a Waiter: wait for it with Wait (or Done), and
// Dequeue it when done with it, in every case. If the new waiter closes a
// deadlock and its transaction is the victim, the waiter is returned
// already done with ErrDeadlock. Enqueue returns ErrTooManyWaiters
// (wrapped) when Config.WaitersMax waiters are queued. waiter may be 0 (a
// non-transactional request). It panics if s is invalid.
func (t *LockTable) Enqueue(waiter TxnID, key []byte, s Strength) (*Waiter, error) {
	if !s.valid() {
		panic(fmt.Sprintf("concurrency: Enqueue with invalid %v", s))
	}
	t.mu.Lock()
	ls := t.mu.locks[string(key)]
	if ls == nil {
		t.mu.Unlock()
		return nil, nil
	}
	upgrade := false
	if waiter != 0 {
		held := heldLocked(ls, waiter)
		if held >= s {
			t.mu.Unlock()
			return nil, nil
		}
		upgrade = held == Shared
	}
	conflict := grantConflictLocked(ls, waiter, s)
	if !conflict && (upgrade || len(ls.queue) == 0) {
		t.mu.Unlock()
		return nil, nil
	}
	if t.mu.waiterCount >= t.cfg.WaitersMax {
		t.mu.Unlock()
		return nil, fmt.Errorf("%w: %d queued, enqueueing on %s", ErrTooManyWaiters, t.cfg.WaitersMax, keyString(key))
	}
	t.mu.waiterSeq++
	w := &Waiter{
		table: t, txn: waiter, strength: s, ls: ls, seq: t.mu.waiterSeq,
		upgrade: upgrade, done: make(chan struct{}),
	}
	if upgrade {
		i := 0
		for i < len(ls.queue) && ls.queue[i].upgrade {
			i++
		}
		ls.queue = slices.Insert(ls.queue, i, w)
	} else {
		ls.queue = append(ls.queue, w)
	}
	t.mu.waiterCount++
	if waiter != 0 {
		r := t.recordLocked(waiter)
		if r.waiters == nil {
			r.waiters = map[*Waiter]struct{}{}
		}
		r.waiters[w] = struct{}{}
	}
	t.markDirtyLocked(ls)
	foreign := t.flushLocked()
	t.mu.Unlock()
	abortForeign(foreign)
	return w, nil
}

// Wait blocks until w is done or ctx ends. It returns w.Err() in the first
// case; in the second it dequeues w and returns an error wrapping
// ctx.Err(). A nil w (nothing to wait for) returns nil at once.
func (t *LockTable) Wait(ctx context.Context, w *Waiter) error {
	if w == nil {
		return nil
	}
	select {
	case <-w.done:
		return w.Err()
	default:
	}
	select {
	case <-w.done:
		return w.Err()
	case <-ctx.Done():
		t.Dequeue(w)
		return fmt.Errorf("concurrency: waiting for lock on %s: %w", keyString([]byte(w.ls.key)), ctx.Err())
	}
}

// Dequeue removes w: from its queue (it completes with ErrDequeued) or, if
// it was woken, ends its claim. It is idempotent; nil is ignored. It panics
// if w belongs to another table.
func (t *LockTable) Dequeue(w *Waiter) {
	if w == nil {
		return
	}
	if w.table != t {
		panic("concurrency: Dequeue of a waiter of another LockTable")
	}
	t.mu.Lock()
	t.dequeueLocked(w, ErrDequeued)
	foreign := t.flushLocked()
	t.mu.Unlock()
	abortForeign(foreign)
}

// dequeueLocked completes a queued w with err, or ends its claim.
func (t *LockTable) dequeueLocked(w *Waiter, err error) {
	ls := w.ls
	switch w.state {
	case waiterQueued:
		i := slices.Index(ls.queue, w)
		if i < 0 {
			panic("concurrency: queued waiter missing from its queue")
		}
		ls.queue = slices.Delete(ls.queue, i, i+1)
		t.mu.waiterCount--
		t.finishLocked(w, err)
	case waiterClaimed:
		i := slices.Index(ls.claims, w)
		if i < 0 {
			panic("concurrency: claiming waiter missing from its claims")
		}
		ls.claims = slices.Delete(ls.claims, i, i+1)
		w.state = waiterFinished
		delete(t.mu.txns[w.txn].waiters, w)
		t.forgetEmptyRecordLocked(w.txn)
	case waiterFinished:
		return
	}
	t.markDirtyLocked(ls)
}

// finishLocked completes a waiter that has left its queue.
func (t *LockTable) finishLocked(w *Waiter, err error) {
	w.state = waiterFinished
	w.err = err
	w.blockers = nil
	close(w.done)
	if w.txn != 0 {
		delete(t.mu.txns[w.txn].waiters, w)
		t.forgetEmptyRecordLocked(w.txn)
		t.mu.changed = append(t.mu.changed, w)
	}
}

// Release releases txn's lock at key, and its claim there, and wakes the
// next compatible waiters. Releasing what is not held is a no-op.
func (t *LockTable) Release(txn TxnID, key []byte) {
	t.mu.Lock()
	if ls := t.mu.locks[string(key)]; ls != nil {
		t.releaseLocked(txn, ls)
	}
	foreign := t.flushLocked()
	t.mu.Unlock()
	abortForeign(foreign)
}

func (t *LockTable) releaseLocked(txn TxnID, ls *lockState) {
	if i := slices.IndexFunc(ls.holders, func(h lockHolder) bool { return h.txn == txn }); i >= 0 {
		ls.holders = slices.Delete(ls.holders, i, i+1)
		delete(t.mu.txns[txn].locks, ls)
	}
	if t.mu.txns[txn] != nil {
		t.dropClaimsLocked(ls, txn)
		t.forgetEmptyRecordLocked(txn)
	}
	t.markDirtyLocked(ls)
}

// ReleaseTxn releases every lock and claim of txn and dequeues its queued
// waiters (they complete with ErrDequeued): the transaction is finished
// and its intents resolved.
func (t *LockTable) ReleaseTxn(txn TxnID) {
	t.mu.Lock()
	if r := t.mu.txns[txn]; r != nil {
		// Sorted, so that wake-ups and deadlock detection happen in the
		// same order on every run.
		states := make([]*lockState, 0, len(r.locks))
		for ls := range r.locks {
			states = append(states, ls)
		}
		slices.SortFunc(states, func(a, b *lockState) int { return strings.Compare(a.key, b.key) })
		ws := make([]*Waiter, 0, len(r.waiters))
		for w := range r.waiters {
			ws = append(ws, w)
		}
		slices.SortFunc(ws, func(a, b *Waiter) int { return compareUint64(a.seq, b.seq) })
		for _, ls := range states {
			t.releaseLocked(txn, ls)
		}
		for _, w := range ws {
			t.dequeueLocked(w, ErrDequeued)
		}
	}
	foreign := t.flushLocked()
	t.mu.Unlock()
	abortForeign(foreign)
}

// Clear drops every lock and claim and completes every queued waiter with
// an error wrapping ErrCleared and reason (which may be nil). The table
// stays usable (empty).
func (t *LockTable) Clear(reason error) {
	err := ErrCleared
	if reason != nil {
		err = fmt.Errorf("%w: %w", ErrCleared, reason)
	}
	t.mu.Lock()
	states := t.sortedStatesLocked()
	for _, ls := range states {
		for _, w := range ls.queue {
			t.finishLocked(w, err)
		}
		for _, c := range ls.claims {
			c.state = waiterFinished
		}
		ls.queue, ls.claims, ls.holders = nil, nil, nil
	}
	t.mu.locks = make(map[string]*lockState)
	t.mu.txns = make(map[TxnID]*txnRecord)
	t.mu.waiterCount = 0
	t.mu.dirty = t.mu.dirty[:0]
	foreign := t.flushLocked()
	t.mu.Unlock()
	abortForeign(foreign)
}

func (t *LockTable) sortedStatesLocked() []*lockState {
	states := make([]*lockState, 0, len(t.mu.locks))
	for _, ls := range t.mu.locks {
		states = append(states, ls)
	}
	slices.SortFunc(states, func(a, b *lockState) int { return strings.Compare(a.key, b.key) })
	return states
}

// flushLocked settles the dirty keys: wakes the waiters that may go on,
// recomputes the blockers of those that wait, forgets empty keys and hands
// the changed edges to the detector. It completes this table's deadlock
// victims at once (which dirties their keys again) and returns the victims
// queued in other tables, which the caller completes after releasing
// t.mu (lock order).
func (t *LockTable) flushLocked() (foreign []*Waiter) {
	for {
		for i := 0; i < len(t.mu.dirty); i++ {
			ls := t.mu.dirty[i]
			ls.dirty = false
			t.wakeLocked(ls)
			t.blockersLocked(ls)
			if len(ls.holders) == 0 && len(ls.claims) == 0 && len(ls.queue) == 0 {
				if t.mu.locks[ls.key] == ls {
					delete(t.mu.locks, ls.key)
				}
			}
		}
		clear(t.mu.dirty)
		t.mu.dirty = t.mu.dirty[:0]
		if len(t.mu.changed) == 0 {
			return foreign
		}
		doomed := t.det.update(t.mu.changed)
		clear(t.mu.changed)
		t.mu.changed = t.mu.changed[:0]
		for _, w := range doomed {
			if w.table != t {
				foreign = append(foreign, w)
			} else if w.state == waiterQueued {
				t.dequeueLocked(w, ErrDeadlock)
			}
		}
	}
}

// abortForeign completes deadlock victims queued in other tables, each
// under its own table's mutex.
func abortForeign(ws []*Waiter) {
	for _, w := range ws {
		w.table.abortDoomed(w)
	}
}

// abortDoomed completes w with ErrDeadlock if it is still queued; if it
// was woken meanwhile, its transaction no longer waits there and the cycle
// is gone.
func (t *LockTable) abortDoomed(w *Waiter) {
	t.mu.Lock()
	if w.state == waiterQueued {
		t.dequeueLocked(w, ErrDeadlock)
	}
	foreign := t.flushLocked()
	t.mu.Unlock()
	abortForeign(foreign)
}

// wakeLocked wakes waiters from the head of ls's queue while they are
// compatible with the holders and claims of other transactions.
func (t *LockTable) wakeLocked(ls *lockState) {
	n := 0
	for n < len(ls.queue) {
		w := ls.queue[n]
		if grantConflictLocked(ls, w.txn, w.strength) {
			break
		}
		n++
		t.mu.waiterCount--
		if w.txn == 0 {
			t.finishLocked(w, nil)
			continue
		}
		w.state = waiterClaimed
		w.blockers = nil
		ls.claims = append(ls.claims, w)
		t.mu.changed = append(t.mu.changed, w)
		close(w.done)
	}
	if n > 0 {
		ls.queue = slices.Delete(ls.queue, 0, n)
	}
}

// blockersLocked recomputes which transactions each waiter in ls's queue
// waits for: the edges of the waits-for graph. A waiter waits for
//
//   - the holders and claimants of other transactions it conflicts with,
//   - the waiters ahead of it in the queue it conflicts with, since it
//     cannot be woken before them.
//
// The second set is trimmed without losing reachability, so that a queue
// of n waiters has O(n) edges rather than O(n²): an exclusive waiter E
// ahead reaches (through its own edges) every holder and every waiter
// ahead of E, so a waiter behind E needs an edge to the nearest such E and
// to the shared waiters between E and itself (if it is exclusive), and
// none to holders. A non-transactional waiter is no node of the graph;
// where it would be the target, its own blockers stand in for it.
func (t *LockTable) blockersLocked(ls *lockState) {
	var lastExcl *Waiter
	runStart := 0 // index of the first shared waiter after lastExcl
	var scratch []TxnID
	via := func(x *Waiter) {
		if x.txn != 0 {
			scratch = append(scratch, x.txn)
		} else {
			scratch = append(scratch, x.blockers...)
		}
	}
	for i, w := range ls.queue {
		scratch = scratch[:0]
		if lastExcl == nil {
			for _, h := range ls.holders {
				if locksConflict(h.strength, w.strength) {
					scratch = append(scratch, h.txn)
				}
			}
			for _, c := range ls.claims {
				if locksConflict(c.strength, w.strength) {
					scratch = append(scratch, c.txn)
				}
			}
		} else {
			via(lastExcl)
		}
		if w.strength == Exclusive {
			for _, x := range ls.queue[runStart:i] {
				via(x)
			}
		}
		scratch = slices.DeleteFunc(scratch, func(x TxnID) bool { return x == w.txn })
		slices.Sort(scratch)
		scratch = slices.Compact(scratch)
		if !slices.Equal(scratch, w.blockers) {
			w.blockers = slices.Clone(scratch)
			if w.txn != 0 {
				t.mu.changed = append(t.mu.changed, w)
			}
		}
		if w.strength == Exclusive {
			lastExcl = w
			runStart = i + 1
		}
	}
}

// Held returns the strength at which txn holds a lock on key, 0 if it
// holds none (a claim is not a lock).
func (t *LockTable) Held(txn TxnID, key []byte) Strength {
	t.mu.Lock()
	defer t.mu.Unlock()
	ls := t.mu.locks[string(key)]
	if ls == nil {
		return 0
	}
	for _, h := range ls.holders {
		if h.txn == txn {
			return h.strength
		}
	}
	return 0
}

// Conflicting returns the holders of key whose locks conflict with txn
// taking it at strength s, in ID order.
func (t *LockTable) Conflicting(txn TxnID, key []byte, s Strength) []HolderInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	ls := t.mu.locks[string(key)]
	if ls == nil {
		return nil
	}
	var out []HolderInfo
	for _, h := range ls.holders {
		if h.txn != txn && locksConflict(h.strength, s) {
			out = append(out, HolderInfo{Txn: h.txn, Strength: h.strength})
		}
	}
	return out
}

// HolderInfo is a holder as Conflicting reports it.
type HolderInfo struct {
	Txn      TxnID
	Strength Strength
}

// Holders returns the transactions holding a lock on key, in ID order.
func (t *LockTable) Holders(key []byte) []TxnID {
	t.mu.Lock()
	defer t.mu.Unlock()
	ls := t.mu.locks[string(key)]
	if ls == nil {
		return nil
	}
	out := make([]TxnID, len(ls.holders))
	for i, h := range ls.holders {
		out[i] = h.txn
	}
	return out
}

// Len returns the number of keys tracked and of waiters queued.
func (t *LockTable) Len() (keys, waiters int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.mu.locks), t.mu.waiterCount
}

// WaitsFor returns the waits-for edges of this table's queued
// transactional waiters: waiting txn -> the txns it waits for, sorted.
// Detector.WaitsFor shows the whole graph, all tables that share it.
func (t *LockTable) WaitsFor() map[TxnID][]TxnID {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[TxnID][]TxnID{}
	for _, ls := range t.mu.locks {
		for _, w := range ls.queue {
			if w.txn != 0 && len(w.blockers) > 0 {
				out[w.txn] = append(out[w.txn], w.blockers...)
			}
		}
	}
	for txn, bs := range out {
		slices.Sort(bs)
		out[txn] = slices.Compact(bs)
	}
	return out
}

// String dumps the table deterministically, one key per line in key
// order: holders with strength, claims, then the queue in order. A
// non-transactional waiter prints as txn 0.
func (t *LockTable) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for _, ls := range t.sortedStatesLocked() {
		b.WriteString(keyString([]byte(ls.key)) + ":")
		if len(ls.holders) > 0 {
			b.WriteString(" holders")
			for _, h := range ls.holders {
				fmt.Fprintf(&b, " %d:%v", h.txn, h.strength)
			}
		}
		if len(ls.claims) > 0 {
			b.WriteString(" claims")
			for _, c := range ls.claims {
				fmt.Fprintf(&b, " %d:%v", c.txn, c.strength)
			}
		}
		if len(ls.queue) > 0 {
			b.WriteString(" queue")
			for _, w := range ls.queue {
				fmt.Fprintf(&b, " %d:%v", w.txn, w.strength)
			}
		}
		b.WriteByte('\n')
	}
	if b.Len() == 0 {
		return "(no locks)\n"
	}
	return b.String()
}
