package process

import (
	"context"
	"fmt"
	"math/rand"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/canopy-db/canopy/client"
)

// TestLargeRangeCatchesUp reproduces issue 13's first item: a follower
// that was down while its range grew past any message size (72 MiB here,
// with splits off; gRPC messages stop at 64 MiB) and whose log was
// truncated past it catches up by a snapshot streamed in chunks, and then
// holds what the others hold (I5). Restarted with a 16 MiB size limit,
// the nodes split the range, and every acknowledged write reads back.
func TestLargeRangeCatchesUp(t *testing.T) {
	needBinary(t)
	if testing.Short() {
		t.Skip("writes 72 MiB to three nodes")
	}
	c := newClusterWith(t, 3, []string{"--range-max-size", "off"})
	c.mustCLI("init", "--host", c.addrs[0])
	c.waitLive(3)
	// SIGHUP (a node whose terminal went away) stops it as SIGTERM does:
	// cleanly, and saying so in its log.
	c.stopWith(2, syscall.SIGHUP)
	if log := readFile(t, c.nodes[2].logPath); !strings.Contains(log, "msg=stopping signal=hangup") {
		t.Errorf("node 3's log after SIGHUP has no stopping line:\n%s", log)
	}

	ctx := context.Background()
	db, err := client.Open(ctx, c.addrs[:2])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	acked := map[string]string{}
	rng := rand.New(rand.NewSource(1))
	put := func(k string, v []byte) {
		c.eventually("put "+k, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), opMax)
			defer cancel()
			return db.Put(ctx, []byte(k), v)
		})
		acked[k] = string(v)
	}
	for i := 0; i < 72; i++ {
		v := make([]byte, 1<<20)
		rng.Read(v)
		put(fmt.Sprintf("big/%03d", i), v)
	}
	// Enough entries after them that both live replicas truncate their
	// logs past what n3 holds (replica.Config.LogEntriesKeep, 500).
	for i := 0; i < 1100; i++ {
		put(fmt.Sprintf("small/%04d", i), []byte(fmt.Sprintf("v%d", i)))
	}

	c.start(2)
	waitCaughtUp(t, c, db, 2)
	log := readFile(t, c.nodes[2].logPath)
	if !strings.Contains(log, "snapshot received") {
		t.Fatalf("node 3 caught up without a snapshot; its log:\n%s", lastRun(log))
	}

	// I5: the replicas of the user range hold the same versions.
	for i := range c.nodes {
		c.stop(i)
	}
	rows := make([]string, 3)
	for i, nd := range c.nodes {
		out := c.mustCLI("debug", "store", "--store", nd.store)
		rows[i] = userRangeRow(t, out)
	}
	if rows[1] != rows[2] {
		t.Fatalf("after catch-up, n2 and n3 differ on the user range:\nn2: %s\nn3: %s", rows[1], rows[2])
	}

	for i, nd := range c.nodes {
		nd.args = []string{"--range-max-size", "16MiB"}
		c.start(i)
	}
	c.waitLive(3)
	c.eventually("the user range split by size", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), opMax)
		defer cancel()
		ranges, err := db.Ranges(ctx)
		if err != nil {
			return err
		}
		user := 0
		for _, r := range ranges {
			if len(r.Desc.EndKey) == 0 || r.Desc.EndKey[0] >= 0x01 {
				user++
			}
		}
		if user < 4 {
			return fmt.Errorf("%d ranges hold user keys, want at least 4", user)
		}
		return nil
	})
	for i := range c.nodes {
		waitCaughtUp(t, c, db, i)
	}
	c.readBack(db, "after the catch-up and the splits", acked)
}

// debugRow matches a range row of `canopy debug store`: range, start,
// end, term, commit, applied, truncated, log, GC threshold, versions,
// intents, plain.
var debugRow = regexp.MustCompile(`(?m)^r\d+\s+(\S+)\s+(\S+)\s+\d+\s+\d+\s+(\d+)\s+\d+\s+\d+\s+\d+\s+(\d+)\s+(\d+)\s+\d+$`)

// userRangeRow returns the span, applied index, versions and intents of
// the last range (the user keyspace's, before any split) in `canopy debug
// store`'s output.
func userRangeRow(t *testing.T, out string) string {
	t.Helper()
	for _, m := range debugRow.FindAllStringSubmatch(out, -1) {
		if m[2] == "/Max" {
			return fmt.Sprintf("span %s-%s applied %s versions %s intents %s", m[1], m[2], m[3], m[4], m[5])
		}
	}
	t.Fatalf("no user range in:\n%s", out)
	return ""
}
