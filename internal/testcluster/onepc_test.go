package testcluster_test

import (
	"context"
	"errors"
	"testing"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestOnePCCommit runs Txn.CommitWith on a real cluster: writes that fall
// in one range (with the keys read) commit in one CommitOnePC request,
// with no intent left (a read-only transaction reads them without
// resolving anything); writes over two ranges fall back to the ordinary
// commit; a conflict with a commit after the start aborts, retryable.
func TestOnePCCommit(t *testing.T) {
	ctx := context.Background()
	c := startCluster(t, testcluster.Options{Nodes: 3, InitialRanges: 4})
	db := openDB(t, c)
	// "a" and "b" lie in one user range, "\x10" in another (InitialRanges
	// 4 splits the user keyspace by the first byte).
	if err := db.Put(ctx, []byte("a"), []byte("0")); err != nil {
		t.Fatal(err)
	}
	err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		if _, _, err := txn.Get(ctx, []byte("a")); err != nil {
			return err
		}
		return txn.CommitWith(ctx, client.Write{Key: []byte("a"), Value: []byte("1")}, client.Write{Key: []byte("b"), Value: []byte("2")})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := db.Stats().OnePCCommits; n != 1 {
		t.Fatalf("one-phase commits: %d, want 1", n)
	}
	resolvedBefore := db.Stats().IntentsResolved
	reader := openDB(t, c)
	for k, want := range map[string]string{"a": "1", "b": "2"} {
		v, ok, err := reader.Get(ctx, []byte(k))
		if err != nil || !ok || string(v) != want {
			t.Fatalf("get %q: %q %v %v, want %q", k, v, ok, err, want)
		}
	}
	if n := reader.Stats().IntentsResolved; n != 0 {
		t.Fatalf("reader resolved %d intents after a one-phase commit", n)
	}
	if n := db.Stats().IntentsResolved; n != resolvedBefore {
		t.Fatalf("the 1PC client resolved %d intents", n-resolvedBefore)
	}

	// Two ranges: the ordinary commit.
	err = db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		return txn.CommitWith(ctx, client.Write{Key: []byte("a"), Value: []byte("3")}, client.Write{Key: []byte("\x10"), Value: []byte("4")})
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := db.Stats().OnePCCommits; n != 1 {
		t.Fatalf("one-phase commits: %d after a two-range commit, want 1", n)
	}
	for k, want := range map[string]string{"a": "3", "\x10": "4"} {
		v, ok, err := reader.Get(ctx, []byte(k))
		if err != nil || !ok || string(v) != want {
			t.Fatalf("get %q: %q %v %v, want %q", k, v, ok, err, want)
		}
	}

	// Switched off for one transaction: the ordinary commit.
	err = db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		return txn.CommitWith(ctx, client.Write{Key: []byte("b"), Value: []byte("5")})
	}, client.WithOnePC(false))
	if err != nil {
		t.Fatal(err)
	}
	if n := db.Stats().OnePCCommits; n != 1 {
		t.Fatalf("one-phase commits: %d with 1PC off, want 1", n)
	}

	// A write committed after our start: the 1PC refuses, retryable.
	txn, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Put(ctx, []byte("b"), []byte("6")); err != nil {
		t.Fatal(err)
	}
	err = txn.CommitWith(ctx, client.Write{Key: []byte("b"), Value: []byte("7")})
	if !errors.Is(err, client.ErrRetryable) {
		t.Fatalf("1PC over a newer version: %v, want a retryable error", err)
	}
	if v, _, _ := reader.Get(ctx, []byte("b")); string(v) != "6" {
		t.Fatalf("b = %q after the refused 1PC, want 6", v)
	}
}
