package testcluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// watchRecord is what one watcher delivered, in order.
type watchRecord struct {
	mu     sync.Mutex
	events []client.WatchEvent
	err    error
	done   chan struct{}
}

// record collects w's events until it ends.
func record(w *client.Watcher) *watchRecord {
	r := &watchRecord{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ev := range w.Events() {
			r.mu.Lock()
			r.events = append(r.events, ev)
			r.mu.Unlock()
		}
		r.mu.Lock()
		r.err = w.Err()
		r.mu.Unlock()
	}()
	return r
}

// resolved returns the last resolved timestamp delivered.
func (r *watchRecord) resolved() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0; i-- {
		if r.events[i].Resolved != 0 {
			return r.events[i].Resolved
		}
	}
	return 0
}

// waitResolved waits until r delivered a resolved timestamp >= ts.
func (r *watchRecord) waitResolved(t *testing.T, name string, ts uint64, deadline time.Duration) {
	t.Helper()
	end := time.Now().Add(deadline)
	for r.resolved() < ts {
		select {
		case <-r.done:
			t.Fatalf("watcher %s ended before resolving %d: %v", name, ts, r.err)
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("watcher %s: resolved timestamp %d did not reach %d within %v", name, r.resolved(), ts, deadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type change struct {
	key, value string
	deleted    bool
	ts         uint64
}

func (c change) String() string {
	if c.deleted {
		return fmt.Sprintf("%s DELETE @%d", c.key, c.ts)
	}
	return fmt.Sprintf("%s=%s @%d", c.key, c.value, c.ts)
}

// checkStream checks one watcher's events: resolved timestamps never go
// down and no change comes at or below one delivered before it, changes
// of a key come in increasing commit-timestamp order, and no change comes
// twice. It returns the changes at or below upTo.
func checkStream(t *testing.T, name string, evs []client.WatchEvent, upTo uint64) []change {
	t.Helper()
	var resolved uint64
	last := map[string]uint64{}
	seen := map[string]bool{}
	var out []change
	for i, ev := range evs {
		if ev.Resolved != 0 {
			if ev.Resolved < resolved {
				t.Fatalf("watcher %s: event %d: resolved timestamp went down from %d to %d", name, i, resolved, ev.Resolved)
			}
			resolved = ev.Resolved
			continue
		}
		c := change{key: string(ev.Key), value: string(ev.Value), deleted: ev.Deleted, ts: ev.Ts}
		if ev.Ts <= resolved {
			t.Fatalf("watcher %s: event %d: change %v at or below the resolved timestamp %d delivered before it", name, i, c, resolved)
		}
		if ev.Ts <= last[c.key] {
			t.Fatalf("watcher %s: event %d: change %v after one at %d of the same key", name, i, c, last[c.key])
		}
		last[c.key] = ev.Ts
		id := fmt.Sprintf("%s@%d", c.key, c.ts)
		if seen[id] {
			t.Fatalf("watcher %s: event %d: change %v delivered twice", name, i, c)
		}
		seen[id] = true
		if ev.Ts <= upTo {
			out = append(out, c)
		}
	}
	return out
}

func sortChanges(cs []change) {
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].key != cs[j].key {
			return cs[i].key < cs[j].key
		}
		return cs[i].ts < cs[j].ts
	})
}

// TestWatchMatchesHistory watches a span while clients write to it (plain
// puts and deletes, transactions that commit, transactions that abort),
// while the span's leaseholder moves to another node, the range splits and
// a leaseholder's node restarts. Every watcher (one from before the writes,
// one started in the middle of them) must deliver exactly the committed
// history above its start: no change lost, none twice, each key's changes
// in commit-timestamp order, no change at or below a resolved timestamp
// delivered before it. The history is MVCC's, read by a last watcher
// started after the writes (a catch-up scan), and checked against what
// the writers were told: every acknowledged write is there with its
// commit timestamp, no aborted one is.
func TestWatchMatchesHistory(t *testing.T) {
	seed := testSeed(t)
	c := startCluster(t, testcluster.Options{Nodes: 3})
	db := openDB(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	span := client.PrefixSpan([]byte("w/"))
	start, err := db.Timestamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first, err := db.Watch(ctx, span, start)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	recFirst := record(first)

	// The writers: each write has a value of its own.
	type written struct {
		key, value string
		deleted    bool
		ts         uint64 // 0: not known (plain writes)
	}
	var (
		mu        sync.Mutex
		committed []written
		aborted   []written
		uncertain []written // outcome unknown
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := func() string { return fmt.Sprintf("w/%c%02d", 'a'+rune(rng.IntN(26)), rng.IntN(4)) }
				val := fmt.Sprintf("v%d-%d", w, i)
				octx, ocancel := context.WithTimeout(ctx, opDeadline)
				switch op := rng.IntN(10); {
				case op < 3: // plain put or delete
					k, del := key(), op == 0
					var err error
					if del {
						err = db.Delete(octx, []byte(k))
					} else {
						err = db.Put(octx, []byte(k), []byte(val))
					}
					wr := written{key: k, value: val, deleted: del}
					mu.Lock()
					switch {
					case err == nil:
						committed = append(committed, wr)
					case errors.Is(err, client.ErrAmbiguous):
						uncertain = append(uncertain, wr)
					default:
						aborted = append(aborted, wr)
					}
					mu.Unlock()
				default: // a transaction of 1-3 writes; one in four aborts
					n, abort := 1+rng.IntN(3), rng.IntN(4) == 0
					var ws []written
					for j := 0; j < n; j++ {
						ws = append(ws, written{key: key(), value: fmt.Sprintf("%s-%d", val, j)})
					}
					var last *client.Txn
					errAbort := errors.New("abort")
					err := db.Txn(octx, func(ctx context.Context, txn *client.Txn) error {
						last = txn
						for _, wr := range ws {
							if err := txn.Put(ctx, []byte(wr.key), []byte(wr.value)); err != nil {
								return err
							}
						}
						if abort {
							return errAbort
						}
						return nil
					})
					mu.Lock()
					// A transaction writing a key twice: only the last write
					// is committed.
					lastOf := map[string]int{}
					for j, wr := range ws {
						lastOf[wr.key] = j
					}
					for j, wr := range ws {
						switch {
						case err == nil && lastOf[wr.key] == j:
							wr.ts = last.CommitTs()
							committed = append(committed, wr)
						case errors.Is(err, client.ErrAmbiguous) && lastOf[wr.key] == j:
							uncertain = append(uncertain, wr)
						default:
							aborted = append(aborted, wr)
						}
					}
					mu.Unlock()
				}
				ocancel()
			}
		}()
	}

	// Faults while the writers run, and a second watcher from the middle.
	pause := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	pause(time.Second)
	mid, err := db.Timestamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := db.Watch(ctx, span, mid)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	recSecond := record(second)

	rangeID, holder, err := busiestRange(ctx, db, c, [][]byte{[]byte("w/a00")})
	if err != nil {
		t.Fatal(err)
	}
	to := (holder + 1) % 3
	t.Logf("moving the leases (r%d is at n%d) to n%d", rangeID, holder+1, to+1)
	for i := 0; i < 3; i++ {
		c.Node(i).SetLeaderPreference(uint64(to + 1))
	}
	pause(1500 * time.Millisecond)
	if err := db.Split(ctx, []byte("w/m")); err != nil {
		t.Fatalf("split: %v", err)
	}
	t.Logf("split at w/m")
	pause(time.Second)
	for i := 0; i < 3; i++ {
		c.Node(i).SetLeaderPreference(0)
	}
	_, holder, err = busiestRange(ctx, db, c, [][]byte{[]byte("w/z00")})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restarting n%d, leaseholder of w/z", holder+1)
	c.StopNode(holder)
	pause(500 * time.Millisecond)
	if err := c.RestartNode(holder); err != nil {
		t.Fatal(err)
	}
	pause(1500 * time.Millisecond)
	close(stop)
	wg.Wait()

	end, err := db.Timestamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	history, err := db.Watch(ctx, span, start)
	if err != nil {
		t.Fatal(err)
	}
	defer history.Close()
	recHistory := record(history)
	for name, r := range map[string]*watchRecord{"first": recFirst, "second": recSecond, "history": recHistory} {
		r.waitResolved(t, name, end, time.Minute)
	}
	first.Close()
	second.Close()
	history.Close()
	// The faults ended the first watcher's feeds at least three times:
	// the lease move, the split, the restart.
	if n := first.Resumes(); n < 3 {
		t.Fatalf("the first watcher resumed its range feeds %d times; the faults should have made it resume at least 3 times", n)
	}

	want := checkStream(t, "history", recHistory.events, end)
	sortChanges(want)
	got := checkStream(t, "first", recFirst.events, end)
	sortChanges(got)
	if d := diffChanges(want, got); d != "" {
		t.Fatalf("watcher from the start differs from the history:\n%s", d)
	}
	var wantMid []change
	for _, ch := range want {
		if ch.ts > mid {
			wantMid = append(wantMid, ch)
		}
	}
	gotMid := checkStream(t, "second", recSecond.events, end)
	sortChanges(gotMid)
	if d := diffChanges(wantMid, gotMid); d != "" {
		t.Fatalf("watcher from the middle differs from the history:\n%s", d)
	}

	// The history holds what the writers were told, and nothing else.
	byValue := map[string]change{}
	for _, ch := range want {
		if !ch.deleted {
			byValue[ch.value] = ch
		}
	}
	for _, wr := range committed {
		if wr.deleted {
			continue
		}
		ch, ok := byValue[wr.value]
		if !ok || ch.key != wr.key {
			t.Fatalf("committed write %s=%s is not in the history", wr.key, wr.value)
		}
		if wr.ts != 0 && ch.ts != wr.ts {
			t.Fatalf("committed write %s=%s: commit timestamp %d, history says %d", wr.key, wr.value, wr.ts, ch.ts)
		}
		delete(byValue, wr.value)
	}
	for _, wr := range uncertain {
		delete(byValue, wr.value)
	}
	for v, ch := range byValue {
		t.Fatalf("history holds %v (value %s), which no writer was told committed", ch, v)
	}
	t.Logf("%d committed writes, %d aborted, %d uncertain; history %d changes; watchers: first %d events (%d resumes), second %d (%d resumes)",
		len(committed), len(aborted), len(uncertain), len(want), len(recFirst.events), first.Resumes(), len(recSecond.events), second.Resumes())
}

func diffChanges(want, got []change) string {
	var b bytes.Buffer
	i, j := 0, 0
	for i < len(want) || j < len(got) {
		switch {
		case j >= len(got) || (i < len(want) && (want[i].key < got[j].key || (want[i].key == got[j].key && want[i].ts < got[j].ts))):
			fmt.Fprintf(&b, "  missing %v\n", want[i])
			i++
		case i >= len(want) || (got[j].key < want[i].key || (got[j].key == want[i].key && got[j].ts < want[i].ts)):
			fmt.Fprintf(&b, "  extra   %v\n", got[j])
			j++
		default:
			if want[i] != got[j] {
				fmt.Fprintf(&b, "  want %v got %v\n", want[i], got[j])
			}
			i++
			j++
		}
	}
	return b.String()
}

// TestWatchPushesAbandonedIntent: a transaction writes in the watched span
// and its client goes away without deciding it. Its intent holds the
// range's resolved timestamp back; once its heartbeat has expired the
// watcher pushes it (aborts it and removes the intent), so the watch's
// resolved timestamp moves past the abandoned write, which is never
// delivered, while a later committed write is.
func TestWatchPushesAbandonedIntent(t *testing.T) {
	c := startCluster(t, testcluster.Options{Nodes: 3})
	opts := client.Options{HeartbeatTTL: time.Second}
	db := openDB(t, c, client.WithOptions(opts))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	span := client.PrefixSpan([]byte("p/"))
	w, err := db.Watch(ctx, span, 0, client.WithWatchOptions(client.WatchOptions{PushAfter: 200 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rec := record(w)

	gone := openDB(t, c, client.WithOptions(opts))
	txn, err := gone.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := txn.Put(ctx, []byte("p/abandoned"), []byte("never")); err != nil {
		t.Fatal(err)
	}
	// The coordinator goes away: no commit, no rollback, no heartbeat.
	_ = gone.Close()
	if err := db.Put(ctx, []byte("p/after"), []byte("yes")); err != nil {
		t.Fatal(err)
	}
	after, err := db.Timestamp(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec.waitResolved(t, "watch", after, 30*time.Second)
	w.Close()
	var got []string
	for _, ev := range rec.events {
		if ev.Resolved == 0 {
			got = append(got, fmt.Sprintf("%s=%s", ev.Key, ev.Value))
		}
	}
	if len(got) != 1 || got[0] != "p/after=yes" {
		t.Fatalf("watch delivered %v, want only p/after=yes", got)
	}
	if _, found, err := db.Get(ctx, []byte("p/abandoned")); err != nil || found {
		t.Fatalf("the abandoned write reads as found=%v (err %v); its transaction should be aborted", found, err)
	}
}

// TestWatchRefusedOnHierarchy: a watch on a cluster running a hierarchy
// protocol ends at once with ErrInvalidArgument naming the protocol (its
// decisions choose commit timestamps that closed timestamps do not bound,
// so a resolved timestamp could be broken), rather than delivering a
// stream whose promises do not hold.
func TestWatchRefusedOnHierarchy(t *testing.T) {
	c := startCluster(t, testcluster.Options{Nodes: 1, CommitProtocol: "hierarchy-locking"})
	db := openDB(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := db.Watch(ctx, client.PrefixSpan([]byte("w/")), 0)
	if err == nil {
		for range w.Events() {
		}
		err = w.Err()
		w.Close()
	}
	if !errors.Is(err, client.ErrInvalidArgument) || !bytes.Contains([]byte(err.Error()), []byte("hierarchy-locking")) {
		t.Fatalf("watch on a hierarchy-locking cluster: %v, want ErrInvalidArgument naming the protocol", err)
	}
}
