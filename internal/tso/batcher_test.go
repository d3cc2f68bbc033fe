package tso

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// TestBatcher checks that concurrent callers get distinct timestamps from
// batched fetches no larger than the bound, that a fetch's error reaches
// every caller of its batch, and that a caller whose context ends stops
// waiting.
func TestBatcher(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	next, fetches, largest := uint64(1), 0, 0
	fail := false
	b := NewBatcher(4, func(n int) (uint64, error) {
		<-release
		mu.Lock()
		defer mu.Unlock()
		fetches++
		largest = max(largest, n)
		if fail {
			return 0, errors.New("oracle down")
		}
		first := next
		next += uint64(n)
		return first, nil
	})
	const callers = 10
	var wg sync.WaitGroup
	got := make(chan uint64, callers)
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts, err := b.Timestamp(context.Background())
			if err != nil {
				t.Error(err)
			}
			got <- ts
		}()
	}
	close(release)
	wg.Wait()
	close(got)
	seen := map[uint64]bool{}
	for ts := range got {
		if ts == 0 || seen[ts] {
			t.Fatalf("timestamp %d handed out twice or zero", ts)
		}
		seen[ts] = true
	}
	if largest > 4 {
		t.Fatalf("a fetch asked for %d timestamps, bound is 4", largest)
	}
	if fetches < 3 {
		t.Fatalf("%d fetches for %d callers with batches of at most 4", fetches, callers)
	}
	mu.Lock()
	fail = true
	mu.Unlock()
	if _, err := b.Timestamp(context.Background()); err == nil || err.Error() != "oracle down" {
		t.Fatalf("fetch error not passed on: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	unblock := make(chan struct{})
	defer close(unblock) // ends the fetch that nobody waits for any more
	blocked := NewBatcher(1, func(int) (uint64, error) { <-unblock; return 1, nil })
	if _, err := blocked.Timestamp(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended context: %v", err)
	}
}
