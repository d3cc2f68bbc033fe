package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestWatchRefusedIsPermissionError checks that a node's refusal of a
// watch's stream (its authorization interceptor answering Unauthenticated
// or PermissionDenied) ends the watch at once with ErrPermission and the
// node's reason, without gRPC's framing, instead of being retried as a
// broken stream until the watch gives up as unavailable.
func TestWatchRefusedIsPermissionError(t *testing.T) {
	for _, code := range []codes.Code{codes.PermissionDenied, codes.Unauthenticated} {
		t.Run(code.String(), func(t *testing.T) {
			c := newFakeCluster(t, 3)
			reason := "/canopy.Feed/RangeFeed: user \"alice\" may not call it"
			c.mu.Lock()
			c.mu.feedRefusal = status.Error(code, reason)
			c.mu.Unlock()
			db := c.open()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			w, err := db.Watch(ctx, PrefixSpan([]byte("a")), 0)
			if err == nil {
				defer w.Close()
				for range w.Events() {
				}
				err = w.Err()
			}
			if !errors.Is(err, ErrPermission) || !strings.Contains(err.Error(), reason) || strings.Contains(err.Error(), "rpc error") {
				t.Fatalf("watch refused with %v: got %v; want ErrPermission with the reason and no gRPC framing", code, err)
			}
			if ctx.Err() != nil {
				t.Fatalf("the watch ended by its deadline, not at once")
			}
		})
	}
}

// TestWatchRetryUntilDone checks that a watch with RetryUntilDone keeps
// trying a range that cannot be followed past Options.SendAttemptsMax
// attempts, and follows it once a node serves it, where a watch without
// it ends with ErrUnavailable (etcdapi's watches, which etcd's clients
// expect to outlive an outage, use it).
func TestWatchRetryUntilDone(t *testing.T) {
	c := newFakeCluster(t, 3)
	db := c.open(func(o *Options) { o.SendAttemptsMax = 5 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	w, err := db.Watch(ctx, PrefixSpan([]byte("a")), 100)
	if err != nil {
		t.Fatal(err)
	}
	for range w.Events() {
	}
	if err := w.Err(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("without RetryUntilDone: %v, want ErrUnavailable", err)
	}

	c.mu.Lock()
	c.mu.feedServeAfter = c.mu.feedStreams + 12 // more than two rounds of 5 attempts
	c.mu.Unlock()
	w, err = db.Watch(ctx, PrefixSpan([]byte("a")), 100, WithWatchOptions(WatchOptions{RetryUntilDone: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ev, ok := <-w.Events()
	if !ok {
		t.Fatalf("with RetryUntilDone the watch ended: %v", w.Err())
	}
	if ev.Resolved != 101 {
		t.Fatalf("first event %+v, want the checkpoint at 101", ev)
	}
	if n := w.roundsGivenUp.Load(); n < 2 {
		t.Fatalf("%d rounds of attempts given up before the range was followed, want at least 2", n)
	}
}
