package testcluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestConsensusRoundsCounted: the consensus rounds a transaction waits
// for, as client.RoundCounter counts them for canopy bench pipeline, are
// the latency model's (seed 001): W + 1 without pipelining (each write,
// then the status record), 2 with pipelining (the proofs, then the status
// record), at least 1 with parallel commits (the STAGING record beside the
// proofs; more only if one answer came before the next batch was sent).
// The status record's put-unless-exists leaves in a batch sent on the
// DB's context (coalesced status writes), so its wait must be counted on
// the caller's; it once was not, and the table showed W / 1 / 1.
func TestConsensusRoundsCounted(t *testing.T) {
	c := startCluster(t, testcluster.Options{Nodes: 3})
	db := openDB(t, c)
	const writes = 3
	for i, m := range []struct {
		name           string
		opts           []client.TxnOption
		atLeast, exact int64
	}{
		{"off", []client.TxnOption{client.WithPipelining(false), client.WithOnePC(false)}, 0, writes + 1},
		{"pipelined", []client.TxnOption{client.WithPipelining(true), client.WithParallelCommits(false), client.WithOnePC(false)}, 0, 2},
		{"parallel", []client.TxnOption{client.WithPipelining(true), client.WithParallelCommits(true), client.WithOnePC(false)}, 1, 0},
	} {
		// A resent request (a lease moving just after the cluster
		// started, a dropped proposal) counts its round again, never one
		// less: the fewest rounds of three transactions is the model's.
		got := int64(-1)
		for try := 0; try < 3; try++ {
			var rc client.RoundCounter
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			ctx = client.WithRoundCounter(ctx, &rc)
			txn, err := db.Begin(ctx, m.opts...)
			if err != nil {
				t.Fatal(err)
			}
			for w := 0; w < writes; w++ {
				if err := txn.Put(ctx, []byte(fmt.Sprintf("rounds/%d/%d/%d", i, try, w)), []byte("v")); err != nil {
					t.Fatalf("%s: put: %v", m.name, err)
				}
			}
			if err := txn.Commit(ctx); err != nil {
				t.Fatalf("%s: commit: %v", m.name, err)
			}
			cancel()
			if n := rc.Counts().ConsensusRounds; got < 0 || n < got {
				got = n
			}
		}
		if m.exact != 0 && got != m.exact {
			t.Errorf("%s: %d consensus rounds counted, want %d", m.name, got, m.exact)
		}
		if got < m.atLeast {
			t.Errorf("%s: %d consensus rounds counted, want at least %d", m.name, got, m.atLeast)
		}
	}
}
