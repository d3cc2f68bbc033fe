package client

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// TestStatusWritesCoalesce: put-unless-exists cells that arrive while a
// batch to their range is in flight leave together in the next batch, one
// request, and each keeps its own outcome: won, lost to an existing value
// (a cell already there, or written by an earlier cell of the same batch),
// or won again with its own value already there (a resend).
func TestStatusWritesCoalesce(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k := func(s string) []byte { return keys.StatusKey([]byte(s)) }
	// Cells that exist before the batch.
	for _, s := range []string{"old-1", "old-2"} {
		if ok, _, err := db.putUnlessExists(ctx, k(s), []byte("before")); err != nil || !ok {
			t.Fatalf("setup %s: %v %v", s, ok, err)
		}
	}
	b0, c0 := db.statusWrites.counts()

	// Hold the first batch at the server until the others are queued.
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.setBeforeBatch(func(_ uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
		if req.Requests[0].GetPlainPutUnlessExists() != nil {
			once.Do(func() { close(entered); <-release })
		}
		return nil
	})
	type result struct {
		ok       bool
		existing []byte
		err      error
	}
	cells := []struct{ key, value string }{
		{"first", "a"},
		{"new-1", "x"}, {"new-2", "y"},
		{"old-1", "z"},             // exists with another value: lost
		{"old-2", "before"},        // exists with the same value: won (a resend's view)
		{"dup", "p"}, {"dup", "q"}, // one wins, the other finds it
	}
	results := make([]result, len(cells))
	var wg sync.WaitGroup
	put := func(i int) {
		defer wg.Done()
		ok, ex, err := db.putUnlessExists(ctx, k(cells[i].key), []byte(cells[i].value))
		results[i] = result{ok, ex, err}
	}
	wg.Add(1)
	go put(0)
	<-entered
	for i := 1; i < len(cells); i++ {
		wg.Add(1)
		go put(i)
	}
	// Liveness wait until the other cells are queued behind the held batch.
	for queued := 0; queued < len(cells)-1; time.Sleep(time.Millisecond) {
		db.statusWrites.mu.Lock()
		queued = 0
		for _, q := range db.statusWrites.mu.queues {
			queued += len(q.cells)
		}
		db.statusWrites.mu.Unlock()
		if ctx.Err() != nil {
			t.Fatal("cells never queued")
		}
	}
	close(release)
	wg.Wait()

	if b, n := db.statusWrites.counts(); b-b0 != 2 || n-c0 != len(cells) {
		t.Fatalf("%d batches of %d cells, want 2 batches of %d cells (1, then the rest together)", b-b0, n-c0, len(cells))
	}
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("cell %v: %v", cells[i], r.err)
		}
	}
	want := map[int]bool{0: true, 1: true, 2: true, 3: false, 4: true}
	for i, w := range want {
		if results[i].ok != w {
			t.Errorf("cell %v: won=%v, want %v (existing %q)", cells[i], results[i].ok, w, results[i].existing)
		}
	}
	if !bytes.Equal(results[3].existing, []byte("before")) {
		t.Errorf("lost cell sees %q, want the existing value", results[3].existing)
	}
	p, q := results[5], results[6]
	if p.ok == q.ok {
		t.Errorf("duplicate cells: won %v and %v, want exactly one", p.ok, q.ok)
	}
	loser, winner := q, cells[5].value
	if !p.ok {
		loser, winner = p, cells[6].value
	}
	if string(loser.existing) != winner {
		t.Errorf("the losing duplicate sees %q, want the winner's %q", loser.existing, winner)
	}
	// The table holds what the outcomes say.
	for _, s := range []string{"first", "new-1", "new-2", "old-1", "old-2", "dup"} {
		found, v, err := db.plainGet(ctx, k(s))
		if err != nil || !found {
			t.Fatalf("%s: found=%v %v", s, found, err)
		}
		t.Logf("%s = %s", s, v)
	}
	if _, v, _ := db.plainGet(ctx, k("old-1")); string(v) != "before" {
		t.Errorf("old-1 = %q, want it untouched", v)
	}
}

// TestStatusWritesCallerGivesUp: a caller whose context ends before its
// cell is sent gets ErrUnavailable and the cell never leaves; once sent,
// it gets ErrAmbiguous.
func TestStatusWritesCallerGivesUp(t *testing.T) {
	c := newFakeCluster(t, 1)
	db := c.open()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.setBeforeBatch(func(_ uint64, req *rpcpb.BatchRequest) *rpcpb.BatchResponse {
		if req.Requests[0].GetPlainPutUnlessExists() != nil {
			once.Do(func() { close(entered); <-release })
		}
		return nil
	})
	bg := context.Background()
	held, cancelHeld := context.WithCancel(bg)
	errs := make(chan error, 1)
	go func() { _, _, err := db.putUnlessExists(held, keys.StatusKey([]byte("a")), []byte("1")); errs <- err }()
	<-entered
	queued, cancelQueued := context.WithCancel(bg)
	cancelQueued()
	if _, _, err := db.putUnlessExists(queued, keys.StatusKey([]byte("b")), []byte("1")); !errors.Is(err, ErrUnavailable) {
		t.Errorf("cell never sent: %v, want ErrUnavailable", err)
	}
	cancelHeld()
	if err := <-errs; !errors.Is(err, ErrAmbiguous) {
		t.Errorf("cell sent, caller gone: %v, want ErrAmbiguous", err)
	}
	close(release)
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if found, _, _ := db.plainGet(ctx, keys.StatusKey([]byte("b"))); found {
		t.Errorf("the unsent cell was written")
	}
}
