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
