package concurrency

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// parseLatchSpans parses "w:a,r:b-d": access, then a key or start-end.
func parseLatchSpans(t *testing.T, s string) []LatchSpan {
	var out []LatchSpan
	for _, part := range strings.Split(s, ",") {
		acc, keys, ok := strings.Cut(part, ":")
		if !ok {
			t.Fatalf("span %q: want access:key", part)
		}
		var ls LatchSpan
		switch acc {
		case "r":
			ls.Access = Read
		case "w":
			ls.Access = Write
		default:
			t.Fatalf("span %q: access must be r or w", part)
		}
		start, end, _ := strings.Cut(keys, "-")
		ls.Key = []byte(start)
		if end != "" {
			ls.EndKey = []byte(end)
		}
		out = append(out, ls)
	}
	return out
}

// TestLatchManagerDataDriven runs the scripts in testdata/latches. Commands:
//
//	sequence name=<g> spans=<a>:<key>[-<end>],...   Sequence; print whom it waits for
//	ready [name=<g>]                                Ready of one guard, or of all
//	release name=<g>                                Release (then print who is ready)
//	print                                           the manager's dump, sequence numbers as names
//	len                                             Len
func TestLatchManagerDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/latches", func(t *testing.T, path string) {
		m := NewLatchManager()
		guards := map[string]*LatchGuard{}
		var order []string // guard names in Sequence order
		nameOf := func(seq uint64) string {
			for n, g := range guards {
				if g.seq == seq {
					return n
				}
			}
			return fmt.Sprint(seq)
		}
		waitsFor := func(g *LatchGuard) string {
			var names []string
			for _, n := range order {
				if slices.Contains(g.waitFor, guards[n].done) {
					names = append(names, n)
				}
			}
			if names == nil {
				return "nothing"
			}
			return strings.Join(names, " ")
		}
		readiness := func() string {
			var b strings.Builder
			for _, n := range order {
				g := guards[n]
				if g.released {
					continue
				}
				state := "waiting"
				if g.Ready() {
					state = "ready"
				}
				fmt.Fprintf(&b, "%s: %s\n", n, state)
			}
			return b.String()
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var name string
			d.MaybeScanArgs(t, "name", &name)
			switch d.Cmd {
			case "sequence":
				var spans string
				d.ScanArgs(t, "spans", &spans)
				if _, ok := guards[name]; ok {
					d.Fatalf(t, "guard %s exists", name)
				}
				g := m.Sequence(parseLatchSpans(t, spans))
				guards[name] = g
				order = append(order, name)
				return fmt.Sprintf("%s waits for: %s\n", name, waitsFor(g))
			case "ready":
				if name == "" {
					return readiness()
				}
				return fmt.Sprintf("%v\n", guards[name].Ready())
			case "release":
				m.Release(guards[name])
				return readiness()
			case "print":
				return m.format(nameOf)
			case "len":
				return fmt.Sprintf("%d\n", m.Len())
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

func TestLatchAcquireContextCancel(t *testing.T) {
	m := NewLatchManager()
	ctx := context.Background()
	w := []LatchSpan{{Span: Span{Key: []byte("a")}, Access: Write}}
	g1, err := m.Acquire(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	// A second writer waits, then gives up: its latch must go.
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := m.Acquire(cctx, w)
		errc <- err
	}()
	for m.Len() != 2 {
		time.Sleep(time.Millisecond) // until the second request is sequenced
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire after cancel: %v, want context.Canceled", err)
	}
	if n := m.Len(); n != 1 {
		t.Fatalf("Len after cancelled Acquire = %d, want 1", n)
	}
	// A third request, sequenced while the second waited, must still wait
	// for the first.
	g3 := m.Sequence(w)
	if g3.Ready() {
		t.Fatal("third writer ready while the first holds its latch")
	}
	m.Release(g1)
	m.Release(g1) // idempotent
	if err := g3.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	m.Release(g3)
	if n := m.Len(); n != 0 {
		t.Fatalf("Len at end = %d", n)
	}
	// An already cancelled context fails without sequencing anything.
	if _, err := m.Acquire(cctx, w); !errors.Is(err, context.Canceled) || m.Len() != 0 {
		t.Fatalf("Acquire with done ctx: %v, Len %d", err, m.Len())
	}
}

func TestLatchInvalidSpan(t *testing.T) {
	m := NewLatchManager()
	for _, s := range []LatchSpan{
		{Span: Span{Key: []byte("b"), EndKey: []byte("a")}, Access: Read},
		{Span: Span{Key: []byte("a"), EndKey: []byte("a")}, Access: Write},
		{Span: Span{Key: []byte("a")}},
	} {
		if _, err := m.Acquire(context.Background(), []LatchSpan{s}); !errors.Is(err, ErrInvalidSpan) {
			t.Errorf("Acquire(%v %v) = %v, want ErrInvalidSpan", s.Span, s.Access, err)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Sequence with an invalid span did not panic")
		}
	}()
	m.Sequence([]LatchSpan{{Span: Span{Key: []byte("b"), EndKey: []byte("a")}, Access: Read}})
}

// TestLatchManagerPlainTwin checks the manager against a plain model: a
// list of live guards scanned in full. At Sequence, the guard must wait
// for exactly the live earlier guards with a conflicting span; at every
// step a guard is Ready exactly when all of those have been released.
func TestLatchManagerPlainTwin(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		latchPlainTwin(t, seed)
	}
}

// latchPlainTwin runs one seeded history; failures print the seed.
func latchPlainTwin(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0))
	const keysCount = 12
	key := func() []byte { return []byte{'a' + byte(rng.IntN(keysCount))} }
	randomSpans := func() []LatchSpan {
		out := make([]LatchSpan, 1+rng.IntN(3))
		for i := range out {
			out[i].Access = Read
			if rng.IntN(3) == 0 {
				out[i].Access = Write
			}
			out[i].Key = key()
			if rng.IntN(4) == 0 {
				end := key()
				switch c := strings.Compare(string(out[i].Key), string(end)); {
				case c < 0:
					out[i].EndKey = end
				case c > 0:
					out[i].Key, out[i].EndKey = end, out[i].Key
				}
			}
		}
		return out
	}
	plainOverlap := func(a, b Span) bool {
		in := func(k []byte, s Span) bool {
			if s.isPoint() {
				return string(k) == string(s.Key)
			}
			return string(s.Key) <= string(k) && string(k) < string(s.EndKey)
		}
		// Keys are single letters, so testing every letter is exact.
		for c := byte('a'); c < 'a'+keysCount; c++ {
			if in([]byte{c}, a) && in([]byte{c}, b) {
				return true
			}
		}
		return false
	}
	type modelGuard struct {
		g       *LatchGuard
		waitFor []*modelGuard
		live    bool
	}
	m := NewLatchManager()
	var live []*modelGuard
	for step := 0; step < 1500; step++ {
		if len(live) == 0 || rng.IntN(2) == 0 {
			spans := randomSpans()
			mg := &modelGuard{live: true}
			for _, o := range live {
				conflict := false
				for _, a := range spans {
					for _, b := range o.g.spans {
						if latchesConflict(a.Access, b.Access) && plainOverlap(a.Span, b.Span) {
							conflict = true
						}
					}
				}
				if conflict {
					mg.waitFor = append(mg.waitFor, o)
				}
			}
			mg.g = m.Sequence(spans)
			var want, got []<-chan struct{}
			for _, o := range mg.waitFor {
				want = append(want, o.g.done)
			}
			got = mg.g.waitFor
			if !sameChans(want, got) {
				t.Fatalf("seed %d step %d: guard %v waits for %d guards, model says %d", seed, step, spans, len(got), len(want))
			}
			live = append(live, mg)
		} else {
			i := rng.IntN(len(live))
			m.Release(live[i].g)
			live[i].live = false
			live = slices.Delete(live, i, i+1)
		}
		n := 0
		for _, mg := range live {
			ready := true
			for _, o := range mg.waitFor {
				if o.live {
					ready = false
				}
			}
			if mg.g.Ready() != ready {
				t.Fatalf("seed %d step %d: Ready = %v, model %v", seed, step, !ready, ready)
			}
			n += len(mg.g.spans)
		}
		if m.Len() != n {
			t.Fatalf("seed %d step %d: Len %d, model %d", seed, step, m.Len(), n)
		}
	}
}

func sameChans(a, b []<-chan struct{}) bool {
	if len(a) != len(b) {
		return false
	}
	for _, c := range a {
		if !slices.Contains(b, c) {
			return false
		}
	}
	return true
}

// TestLatchManagerConcurrent runs goroutines that latch random spans and
// check, with per-key counters, that no writer overlaps anyone.
func TestLatchManagerConcurrent(t *testing.T) {
	const keysCount, workers, opsPerWorker = 8, 8, 300
	m := NewLatchManager()
	var readers, writers [keysCount]atomic.Int32
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range opsPerWorker {
				lo := rng.IntN(keysCount)
				hi := lo + 1
				if rng.IntN(4) == 0 {
					hi = lo + 1 + rng.IntN(keysCount-lo)
				}
				acc := Read
				if rng.IntN(2) == 0 {
					acc = Write
				}
				s := LatchSpan{Span: Span{Key: []byte{'a' + byte(lo)}}, Access: acc}
				if hi > lo+1 {
					s.EndKey = []byte{'a' + byte(hi)}
				}
				g, err := m.Acquire(context.Background(), []LatchSpan{s})
				if err != nil {
					errc <- err
					return
				}
				for k := lo; k < hi; k++ {
					if acc == Write {
						if writers[k].Add(1) != 1 || readers[k].Load() != 0 {
							errc <- fmt.Errorf("writer on key %d overlaps another latch", k)
						}
					} else {
						readers[k].Add(1)
						if writers[k].Load() != 0 {
							errc <- fmt.Errorf("reader on key %d overlaps a writer", k)
						}
					}
				}
				for k := lo; k < hi; k++ {
					if acc == Write {
						writers[k].Add(-1)
					} else {
						readers[k].Add(-1)
					}
				}
				m.Release(g)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if m.Len() != 0 {
		t.Fatalf("Len at end = %d", m.Len())
	}
}

// BenchmarkLatchManagerPoint acquires and releases one latch on a random
// key of 10,000, from parallel goroutines; a quarter are writes.
func BenchmarkLatchManagerPoint(b *testing.B) {
	const keysCount = 10_000
	keys := make([][]byte, keysCount)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key-%05d", i))
	}
	m := NewLatchManager()
	var seed atomic.Uint64
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 2))
		spans := make([]LatchSpan, 1)
		for pb.Next() {
			spans[0] = LatchSpan{Span: Span{Key: keys[rng.IntN(keysCount)]}, Access: Read}
			if rng.IntN(4) == 0 {
				spans[0].Access = Write
			}
			g, err := m.Acquire(ctx, spans)
			if err != nil {
				b.Fatal(err)
			}
			m.Release(g)
		}
	})
}

// BenchmarkLatchManagerPointHeld is BenchmarkLatchManagerPoint with 1,000
// point latches and 10 range latches held throughout, so that the map, the
// skip list and the range list are not empty.
func BenchmarkLatchManagerPointHeld(b *testing.B) {
	const keysCount = 10_000
	keys := make([][]byte, keysCount)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key-%05d", i))
	}
	m := NewLatchManager()
	for i := 0; i < 1000; i++ {
		m.Sequence([]LatchSpan{{Span: Span{Key: []byte(fmt.Sprintf("held-%05d", i))}, Access: Write}})
	}
	for i := 0; i < 10; i++ {
		m.Sequence([]LatchSpan{{Span: Span{Key: []byte(fmt.Sprintf("zz-%d", i)), EndKey: []byte(fmt.Sprintf("zz-%d~", i))}, Access: Write}})
	}
	var seed atomic.Uint64
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(seed.Add(1), 2))
		spans := make([]LatchSpan, 1)
		for pb.Next() {
			spans[0] = LatchSpan{Span: Span{Key: keys[rng.IntN(keysCount)]}, Access: Read}
			if rng.IntN(4) == 0 {
				spans[0].Access = Write
			}
			g, err := m.Acquire(ctx, spans)
			if err != nil {
				b.Fatal(err)
			}
			m.Release(g)
		}
	})
}
