package concurrency

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

func scanStrength(t *testing.T, d *datadriven.TestData) Strength {
	var s string
	d.ScanArgs(t, "str", &s)
	switch s {
	case "shared":
		return Shared
	case "excl", "exclusive":
		return Exclusive
	}
	d.Fatalf(t, "str must be shared or excl, not %q", s)
	return 0
}

// outcome names how a done waiter completed.
func outcome(err error) string {
	switch {
	case err == nil:
		return "proceed"
	case errors.Is(err, ErrDeadlock):
		return "deadlock"
	case errors.Is(err, ErrCleared):
		return "cleared (" + err.Error() + ")"
	case errors.Is(err, ErrDequeued):
		return "dequeued"
	}
	return err.Error()
}

// TestLockTableDataDriven runs the scripts in testdata/locks. Each script
// starts with one table, t, whose Detector d is shared with every table
// the script adds. Commands (table= defaults to t):
//
//	new-table name=<t> [locks-max=<n>] [waiters-max=<n>] [private-detector]
//	acquire txn=<id> key=<k> str=<shared|excl>     Acquire; "ok" or the error
//	discover txn=<id> key=<k> str=<shared|excl>    AddDiscovered
//	enqueue txn=<id> key=<k> str=<...> name=<w>    Enqueue; "queued", "no conflict" or the error
//	done name=<w>                                  whether w is done, and how
//	dequeue name=<w>                               Dequeue
//	release txn=<id> key=<k>                       Release
//	release-txn txn=<id>                           ReleaseTxn
//	clear [reason=<text>]                          Clear
//	print                                          String
//	holders key=<k>                                Holders
//	waits-for                                      the table's WaitsFor
//	graph                                          the detector's WaitsFor (all tables)
//
// After every command that changes a table, the output lists the waiters
// that became done during it ("w2 done: proceed"), in name order.
func TestLockTableDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/locks", func(t *testing.T, path string) {
		det := NewDetector()
		tables := map[string]*LockTable{"t": NewLockTable(Config{Detector: det})}
		waiters := map[string]*Waiter{}
		reported := map[string]bool{}
		newlyDone := func() string {
			var names []string
			for n, w := range waiters {
				if !reported[n] && isDone(w) {
					names = append(names, n)
				}
			}
			slices.Sort(names)
			var b strings.Builder
			for _, n := range names {
				reported[n] = true
				fmt.Fprintf(&b, "%s done: %s\n", n, outcome(waiters[n].Err()))
			}
			return b.String()
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			tableName := "t"
			d.MaybeScanArgs(t, "table", &tableName)
			lt := tables[tableName]
			if lt == nil && d.Cmd != "new-table" {
				d.Fatalf(t, "no table %s", tableName)
			}
			var txn uint64
			d.MaybeScanArgs(t, "txn", &txn)
			var key, name string
			d.MaybeScanArgs(t, "key", &key)
			d.MaybeScanArgs(t, "name", &name)
			var out string
			switch d.Cmd {
			case "new-table":
				var cfg Config
				d.MaybeScanArgs(t, "locks-max", &cfg.LocksMax)
				d.MaybeScanArgs(t, "waiters-max", &cfg.WaitersMax)
				if !d.HasArg("private-detector") {
					cfg.Detector = det
				}
				tables[name] = NewLockTable(cfg)
				return ""
			case "acquire":
				out = "ok\n"
				if err := lt.Acquire(TxnID(txn), []byte(key), scanStrength(t, d)); err != nil {
					out = err.Error() + "\n"
				}
			case "discover":
				lt.AddDiscovered(TxnID(txn), []byte(key), scanStrength(t, d))
			case "enqueue":
				if _, ok := waiters[name]; ok {
					d.Fatalf(t, "waiter %s exists", name)
				}
				w, err := lt.Enqueue(TxnID(txn), []byte(key), scanStrength(t, d))
				switch {
				case err != nil:
					out = err.Error() + "\n"
				case w == nil:
					out = "no conflict\n"
				default:
					waiters[name] = w
					out = "queued\n"
				}
			case "done":
				w := waiters[name]
				if !isDone(w) {
					return name + ": waiting\n"
				}
				return fmt.Sprintf("%s: done: %s\n", name, outcome(w.Err()))
			case "dequeue":
				lt.Dequeue(waiters[name])
			case "release":
				lt.Release(TxnID(txn), []byte(key))
			case "release-txn":
				lt.ReleaseTxn(TxnID(txn))
			case "clear":
				var reason error
				if d.HasArg("reason") {
					var r string
					d.ScanArgs(t, "reason", &r)
					reason = errors.New(r)
				}
				lt.Clear(reason)
			case "print":
				return lt.String()
			case "holders":
				return fmt.Sprintf("%v\n", lt.Holders([]byte(key)))
			case "held":
				if s := lt.Held(TxnID(txn), []byte(key)); s != 0 {
					return s.String() + "\n"
				}
				return "none\n"
			case "conflicting":
				var b strings.Builder
				for _, h := range lt.Conflicting(TxnID(txn), []byte(key), scanStrength(t, d)) {
					fmt.Fprintf(&b, "%d:%s ", h.Txn, h.Strength)
				}
				if b.Len() == 0 {
					return "none\n"
				}
				return strings.TrimSpace(b.String()) + "\n"
			case "waits-for":
				return formatGraph(lt.WaitsFor())
			case "graph":
				return formatGraph(det.WaitsFor())
			default:
				d.Fatalf(t, "unknown command %s", d.Cmd)
			}
			for _, lt := range tables {
				checkLockTableInvariants(t, lt)
			}
			return out + newlyDone()
		})
	})
}

func isDone(w *Waiter) bool {
	select {
	case <-w.Done():
		return true
	default:
		return false
	}
}

func formatGraph(g map[TxnID][]TxnID) string {
	if len(g) == 0 {
		return "(no edges)\n"
	}
	txns := make([]TxnID, 0, len(g))
	for txn := range g {
		txns = append(txns, txn)
	}
	slices.Sort(txns)
	var b strings.Builder
	for _, txn := range txns {
		fmt.Fprintf(&b, "%d -> %v\n", txn, g[txn])
	}
	return b.String()
}

// checkLockTableInvariants checks the invariants documented on LockTable
// and lockState, and that no queued waiter waits without a real conflict.
func checkLockTableInvariants(t *testing.T, lt *LockTable) {
	t.Helper()
	if err := lockTableInvariants(lt); err != nil {
		t.Fatal(err)
	}
}

func lockTableInvariants(lt *LockTable) error {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if len(lt.mu.locks) > lt.cfg.LocksMax {
		return fmt.Errorf("%d keys tracked, LocksMax %d", len(lt.mu.locks), lt.cfg.LocksMax)
	}
	queued := 0
	for k, ls := range lt.mu.locks {
		if string(ls.key) != k {
			return fmt.Errorf("key %q stored under %q", ls.key, k)
		}
		if len(ls.holders)+len(ls.claims)+len(ls.queue) == 0 {
			return fmt.Errorf("key %q: empty state kept", k)
		}
		for i, h := range ls.holders {
			if h.txn == 0 {
				return fmt.Errorf("key %q: TxnID 0 holds a lock", k)
			}
			if i > 0 && ls.holders[i-1].txn >= h.txn {
				return fmt.Errorf("key %q: holders not sorted: %v", k, ls.holders)
			}
			for _, o := range ls.holders[:i] {
				if locksConflict(o.strength, h.strength) {
					return fmt.Errorf("key %q: conflicting holders %v", k, ls.holders)
				}
			}
			if _, ok := lt.mu.txns[h.txn].locks[ls]; !ok {
				return fmt.Errorf("key %q: holder %d not indexed", k, h.txn)
			}
		}
		for _, c := range ls.claims {
			if c.state != waiterClaimed || c.txn == 0 || !isDone(c) || c.err != nil {
				return fmt.Errorf("key %q: bad claim of txn %d (state %d)", k, c.txn, c.state)
			}
			if _, ok := lt.mu.txns[c.txn].waiters[c]; !ok {
				return fmt.Errorf("key %q: claim of %d not indexed", k, c.txn)
			}
		}
		if len(ls.queue) > 0 && !grantConflictLocked(ls, ls.queue[0].txn, ls.queue[0].strength) {
			return fmt.Errorf("key %q: queue head %d:%v waits without a conflict", k, ls.queue[0].txn, ls.queue[0].strength)
		}
		for _, w := range ls.queue {
			if w.state != waiterQueued || isDone(w) || w.ls != ls {
				return fmt.Errorf("key %q: queued waiter of %d in state %d", k, w.txn, w.state)
			}
			if w.txn != 0 {
				if _, ok := lt.mu.txns[w.txn].waiters[w]; !ok {
					return fmt.Errorf("key %q: waiter of %d not indexed", k, w.txn)
				}
			}
		}
		queued += len(ls.queue)
	}
	if queued != lt.mu.waiterCount || queued > lt.cfg.WaitersMax {
		return fmt.Errorf("waiterCount %d, queued %d, WaitersMax %d", lt.mu.waiterCount, queued, lt.cfg.WaitersMax)
	}
	for txn, r := range lt.mu.txns {
		if len(r.locks) == 0 && len(r.waiters) == 0 {
			return fmt.Errorf("empty record of txn %d kept", txn)
		}
		for w := range r.waiters {
			if w.txn != txn || w.state == waiterFinished {
				return fmt.Errorf("txn %d indexes a finished waiter", txn)
			}
		}
	}
	return nil
}

func TestLockTableWaitContextCancel(t *testing.T) {
	lt := NewLockTable(Config{})
	ctx := context.Background()
	if err := lt.Acquire(1, []byte("a"), Exclusive); err != nil {
		t.Fatal(err)
	}
	w2, err := lt.Enqueue(2, []byte("a"), Exclusive)
	if err != nil || w2 == nil {
		t.Fatalf("Enqueue: %v, %v", w2, err)
	}
	w3, err := lt.Enqueue(3, []byte("a"), Exclusive)
	if err != nil || w3 == nil {
		t.Fatalf("Enqueue: %v, %v", w3, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- lt.Wait(cctx, w2) }()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after cancel = %v, want context.Canceled", err)
	}
	if !errors.Is(w2.Err(), ErrDequeued) {
		t.Fatalf("w2.Err() = %v, want ErrDequeued", w2.Err())
	}
	if _, waiters := lt.Len(); waiters != 1 {
		t.Fatalf("%d waiters after cancel, want 1", waiters)
	}
	if g := lt.WaitsFor(); !slices.Equal(g[3], []TxnID{1}) || len(g) != 1 {
		t.Fatalf("WaitsFor after cancel = %v, want 3 -> [1]", g)
	}
	// The cancelled waiter no longer stands in the way: w3 is next.
	lt.Release(1, []byte("a"))
	if err := lt.Wait(ctx, w3); err != nil {
		t.Fatalf("Wait(w3) = %v", err)
	}
	// A waiter woken but then abandoned by a cancelled context: its claim
	// ends, so the next one is woken.
	w4, _ := lt.Enqueue(4, []byte("a"), Exclusive)
	if w4 == nil {
		t.Fatal("w4 did not queue behind w3's claim")
	}
	lt.Dequeue(w3)
	if err := lt.Wait(ctx, w4); err != nil {
		t.Fatalf("Wait(w4) = %v", err)
	}
	if err := lt.Wait(ctx, nil); err != nil {
		t.Fatalf("Wait(nil) = %v", err)
	}
	lt.Dequeue(w4)
	lt.Dequeue(w4)
	if keys, waiters := lt.Len(); keys != 0 || waiters != 0 {
		t.Fatalf("Len at end = %d keys, %d waiters", keys, waiters)
	}
	checkLockTableInvariants(t, lt)
}

func TestLockTableConfig(t *testing.T) {
	lt := NewLockTable(Config{})
	if lt.cfg.LocksMax != LocksMaxDefault || lt.cfg.WaitersMax != WaitersMaxDefault || lt.det == nil {
		t.Fatalf("defaults not applied: %+v", lt.cfg)
	}
	defer func() {
		if recover() == nil {
			t.Error("negative limit did not panic")
		}
	}()
	NewLockTable(Config{LocksMax: -1})
}

func TestLockTableErrorsWrap(t *testing.T) {
	lt := NewLockTable(Config{LocksMax: 1, WaitersMax: 1})
	_ = lt.Acquire(1, []byte("a"), Exclusive)
	if err := lt.Acquire(2, []byte("b"), Exclusive); !errors.Is(err, ErrLockTableFull) {
		t.Errorf("Acquire past LocksMax = %v", err)
	}
	var ce *ConflictError
	if err := lt.Acquire(2, []byte("a"), Shared); !errors.As(err, &ce) || !slices.Equal(ce.Holders, []TxnID{1}) || string(ce.Key) != "a" {
		t.Errorf("Acquire of a held key = %v", err)
	}
	if _, err := lt.Enqueue(2, []byte("a"), Shared); err != nil {
		t.Fatal(err)
	}
	if _, err := lt.Enqueue(3, []byte("a"), Shared); !errors.Is(err, ErrTooManyWaiters) {
		t.Errorf("Enqueue past WaitersMax = %v", err)
	}
	reason := errors.New("lease lost")
	w := lt.mu.locks["a"].queue[0]
	lt.Clear(reason)
	if err := w.Err(); !errors.Is(err, ErrCleared) || !errors.Is(err, reason) {
		t.Errorf("Err after Clear = %v", err)
	}
}

// TestLockTableRandomized runs seeded random operations against several
// lock tables sharing a detector, next to a plain model of who holds
// what, and checks after every step: the holders equal the model's; the
// table invariants hold (no conflicting holders, every queued waiter
// waits on a real conflict, done exactly when not queued); and the full
// waits-for relation, computed plainly from the queues, has no cycle (no
// undetected deadlock) and contains every edge the detector has.
func TestLockTableRandomized(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		if err := lockTableRandomized(seed, 2500); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

func lockTableRandomized(seed uint64, steps int) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	det := NewDetector()
	tables := []*LockTable{
		NewLockTable(Config{Detector: det, LocksMax: 5, WaitersMax: 12}),
		NewLockTable(Config{Detector: det, LocksMax: 5, WaitersMax: 12}),
	}
	const txnsCount, keysCount = 6, 4
	// model[table][key][txn] is the strength txn holds.
	model := make([]map[string]map[TxnID]Strength, len(tables))
	for i := range model {
		model[i] = map[string]map[TxnID]Strength{}
	}
	var live []*Waiter
	strength := func() Strength {
		if rng.IntN(2) == 0 {
			return Shared
		}
		return Exclusive
	}
	for step := 0; step < steps; step++ {
		ti := rng.IntN(len(tables))
		lt := tables[ti]
		txn := TxnID(rng.IntN(txnsCount + 1)) // 0 is non-transactional
		key := string(rune('a' + rng.IntN(keysCount)))
		var op string
		switch r := rng.IntN(100); {
		case r < 30:
			op = "enqueue"
			w, err := lt.Enqueue(txn, []byte(key), strength())
			if err != nil && !errors.Is(err, ErrTooManyWaiters) {
				return fmt.Errorf("step %d: Enqueue: %v", step, err)
			}
			if w != nil {
				live = append(live, w)
			}
		case r < 55:
			if txn == 0 {
				continue
			}
			op = "acquire"
			s := strength()
			_, tracked := lt.mu.locks[key] // no lock needed: one goroutine
			err := lt.Acquire(txn, []byte(key), s)
			holders := model[ti][key]
			conflict := false
			for h, hs := range holders {
				if h != txn && locksConflict(hs, s) {
					conflict = true
				}
			}
			switch {
			case conflict:
				var ce *ConflictError
				if !errors.As(err, &ce) {
					return fmt.Errorf("step %d: Acquire(%d, %s, %v) = %v, model says conflict", step, txn, key, s, err)
				}
			case err != nil && errors.Is(err, ErrLockTableFull) && !tracked:
			case err != nil:
				return fmt.Errorf("step %d: Acquire(%d, %s, %v) = %v, model says ok", step, txn, key, s, err)
			default:
				if holders == nil {
					holders = map[TxnID]Strength{}
					model[ti][key] = holders
				}
				holders[txn] = max(holders[txn], s)
			}
		case r < 65 && len(live) > 0:
			op = "dequeue"
			i := rng.IntN(len(live))
			live[i].table.Dequeue(live[i])
			live = slices.Delete(live, i, i+1)
		case r < 80:
			op = "release"
			lt.Release(txn, []byte(key))
			delete(model[ti][key], txn)
		case r < 90:
			op = "release-txn"
			lt.ReleaseTxn(txn)
			for _, hs := range model[ti] {
				delete(hs, txn)
			}
		case r < 99:
			// A woken waiter re-evaluates: it acquires or dequeues.
			op = "finish"
			for _, w := range live {
				if isDone(w) && w.txn != 0 && w.Err() == nil && rng.IntN(2) == 0 {
					if err := w.table.Acquire(w.txn, w.Key(), w.strength); err == nil {
						mi := slices.Index(tables, w.table)
						k := string(w.Key())
						if model[mi][k] == nil {
							model[mi][k] = map[TxnID]Strength{}
						}
						model[mi][k][w.txn] = max(model[mi][k][w.txn], w.strength)
					}
				}
				w.table.Dequeue(w)
			}
			live = live[:0]
		default:
			op = "clear"
			lt.Clear(nil)
			model[ti] = map[string]map[TxnID]Strength{}
		}
		for i, lt := range tables {
			if err := lockTableInvariants(lt); err != nil {
				return fmt.Errorf("step %d (%s): table %d: %v\n%s", step, op, i, err, lt)
			}
			for k := range keysCount {
				key := string(rune('a' + k))
				var want []TxnID
				for h := range model[i][key] {
					want = append(want, h)
				}
				slices.Sort(want)
				if got := lt.Holders([]byte(key)); !slices.Equal(got, want) {
					return fmt.Errorf("step %d (%s): table %d key %s: holders %v, model %v", step, op, i, key, got, want)
				}
			}
		}
		if err := checkNoDeadlock(tables, det); err != nil {
			return fmt.Errorf("step %d (%s): %v\n%s%s", step, op, err, tables[0], tables[1])
		}
	}
	// Liveness: once every transaction finishes, every waiter is done and
	// the tables are empty.
	for txn := TxnID(0); txn <= txnsCount; txn++ {
		for _, lt := range tables {
			lt.ReleaseTxn(txn)
		}
	}
	for _, w := range live {
		w.table.Dequeue(w)
		if !isDone(w) {
			return fmt.Errorf("waiter of %d not done after every txn finished", w.txn)
		}
	}
	for i, lt := range tables {
		if keys, waiters := lt.Len(); keys != 0 || waiters != 0 {
			return fmt.Errorf("table %d: %d keys, %d waiters left:\n%s", i, keys, waiters, lt)
		}
	}
	if g := det.WaitsFor(); len(g) != 0 {
		return fmt.Errorf("detector keeps edges %v", g)
	}
	return nil
}

// checkNoDeadlock computes the waits-for relation plainly: a queued waiter
// waits for every other transaction holding or claiming a conflicting
// lock, and for every conflicting waiter ahead of it (for a
// non-transactional one, for what that one waits for). It must be acyclic,
// and every detector edge a -> b must be a path a ->* b in it.
func checkNoDeadlock(tables []*LockTable, det *Detector) error {
	full := map[TxnID]map[TxnID]bool{}
	add := func(a, b TxnID) {
		if a == b {
			return
		}
		if full[a] == nil {
			full[a] = map[TxnID]bool{}
		}
		full[a][b] = true
	}
	for _, lt := range tables {
		lt.mu.Lock()
		for _, ls := range lt.mu.locks {
			blockers := make([][]TxnID, len(ls.queue))
			for i, w := range ls.queue {
				var bs []TxnID
				for _, h := range ls.holders {
					if locksConflict(h.strength, w.strength) {
						bs = append(bs, h.txn)
					}
				}
				for _, c := range ls.claims {
					if locksConflict(c.strength, w.strength) {
						bs = append(bs, c.txn)
					}
				}
				for j, x := range ls.queue[:i] {
					if !locksConflict(x.strength, w.strength) {
						continue
					}
					if x.txn != 0 {
						bs = append(bs, x.txn)
					} else {
						bs = append(bs, blockers[j]...)
					}
				}
				blockers[i] = bs
				if w.txn != 0 {
					for _, b := range bs {
						add(w.txn, b)
					}
				}
			}
		}
		lt.mu.Unlock()
	}
	reach := func(from, to TxnID) bool {
		seen := map[TxnID]bool{from: true}
		stack := []TxnID{from}
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for y := range full[x] {
				if y == to {
					return true
				}
				if !seen[y] {
					seen[y] = true
					stack = append(stack, y)
				}
			}
		}
		return false
	}
	for a := range full {
		if reach(a, a) {
			return fmt.Errorf("undetected deadlock through txn %d: %v", a, full)
		}
	}
	for a, bs := range det.WaitsFor() {
		for _, b := range bs {
			if !reach(a, b) {
				return fmt.Errorf("detector edge %d -> %d is no real wait: %v", a, b, full)
			}
		}
	}
	return nil
}

// TestLockTableConcurrent runs transactions on goroutines over two tables
// that share a detector: each locks a few random keys exclusively, waiting
// in the queues, and aborts (releasing everything) when it is a deadlock
// victim. Everyone must finish: a missed deadlock would hang the test
// until its context deadline, which fails it.
func TestLockTableConcurrent(t *testing.T) {
	det := NewDetector()
	tables := []*LockTable{NewLockTable(Config{Detector: det}), NewLockTable(Config{Detector: det})}
	const workers, txnsPerWorker, keysCount = 6, 60, 5
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	nextTxn := TxnID(0)
	var deadlocks int
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for range txnsPerWorker {
				mu.Lock()
				nextTxn++
				txn := nextTxn
				mu.Unlock()
				for attempt := 0; ; attempt++ {
					aborted := false
					for range 3 {
						lt := tables[rng.IntN(len(tables))]
						key := []byte{'a' + byte(rng.IntN(keysCount))}
						s := Exclusive
						if rng.IntN(3) == 0 {
							s = Shared
						}
						for {
							wt, err := lt.Enqueue(txn, key, s)
							if err != nil {
								errc <- err
								return
							}
							if err := lt.Wait(ctx, wt); err != nil {
								if errors.Is(err, ErrDeadlock) {
									aborted = true
									break
								}
								errc <- fmt.Errorf("txn %d: %w", txn, err)
								return
							}
							err = lt.Acquire(txn, key, s)
							lt.Dequeue(wt)
							var ce *ConflictError
							if errors.As(err, &ce) {
								continue // someone else acquired first: wait again
							}
							if err != nil {
								errc <- err
								return
							}
							break
						}
						if aborted {
							break
						}
					}
					for _, lt := range tables {
						lt.ReleaseTxn(txn)
					}
					if !aborted {
						break
					}
					mu.Lock()
					deadlocks++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for i, lt := range tables {
		checkLockTableInvariants(t, lt)
		if keys, waiters := lt.Len(); keys != 0 || waiters != 0 {
			t.Fatalf("table %d: %d keys, %d waiters left", i, keys, waiters)
		}
	}
	t.Logf("%d deadlocks broken", deadlocks)
}

// BenchmarkLockTableUncontended is the common path of one transactional
// write: Enqueue (nothing to wait for), Acquire, Release, on a random key
// of 10,000, from parallel goroutines.
func BenchmarkLockTableUncontended(b *testing.B) {
	const keysCount = 10_000
	keys := make([][]byte, keysCount)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key-%05d", i))
	}
	lt := NewLockTable(Config{})
	var mu sync.Mutex
	next := TxnID(0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		next++
		txn := next
		mu.Unlock()
		rng := rand.New(rand.NewPCG(uint64(txn), 4))
		for pb.Next() {
			k := keys[rng.IntN(keysCount)]
			w, err := lt.Enqueue(txn, k, Exclusive)
			if err != nil {
				b.Fatal(err)
			}
			if w != nil {
				// Another goroutine holds k: wait like a real caller.
				if err := lt.Wait(context.Background(), w); err != nil {
					b.Fatal(err)
				}
			}
			if err := lt.Acquire(txn, k, Exclusive); err != nil {
				lt.Dequeue(w)
				continue
			}
			lt.Dequeue(w)
			lt.Release(txn, k)
		}
	})
}
