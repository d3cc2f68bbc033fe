package process

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/client"
)

// TestForeignStoreIsRefused reproduces issue 13's second fault: clusters P
// and Q created on the same three addresses; P's n1 and n2 are started on
// their stores, n3 on Q's n3 store. The foreign node must not take part:
// P's nodes refuse its RPCs and log it, it refuses to serve and exits with
// one error line naming both clusters, and P keeps serving its data.
func TestForeignStoreIsRefused(t *testing.T) {
	needBinary(t)
	c := newCluster(t, 3)
	ctx := context.Background()
	// create runs `canopy init` on the running nodes, writes key=value
	// and stops the nodes; it returns the stores' new places.
	create := func(name string) []string {
		t.Helper()
		c.mustCLI("init", "--host", c.addrs[0], "--initial-ranges", "2")
		c.waitLive(3)
		db, err := client.Open(ctx, c.addrs)
		if err != nil {
			t.Fatal(err)
		}
		c.eventually("put in cluster "+name, func() error {
			ctx, cancel := context.WithTimeout(ctx, opMax)
			defer cancel()
			return db.Put(ctx, []byte("cluster"), []byte(name))
		})
		_ = db.Close()
		var moved []string
		for i := range c.nodes {
			c.stop(i)
			to := c.nodes[i].store + "-" + name
			if err := os.Rename(c.nodes[i].store, to); err != nil {
				t.Fatal(err)
			}
			moved = append(moved, to)
		}
		return moved
	}
	p := create("P")
	for i := range c.nodes {
		c.start(i)
	}
	q := create("Q")
	for i, from := range []string{p[0], p[1], q[2]} {
		if err := os.Rename(from, c.nodes[i].store); err != nil {
			t.Fatal(err)
		}
	}
	c.start(0)
	c.start(1)
	code, out := runUntilExit(t, c, 2)
	last := lastLine(out)
	if code != 1 || !strings.HasPrefix(last, "error: ") || !strings.Contains(last, "belongs to cluster") ||
		!strings.Contains(last, "another cluster") {
		t.Fatalf("node 3 on Q's store: exit status %d, last line %q; want 1 and an error line naming the clusters; output:\n%s", code, last, out)
	}
	if strings.Contains(out, "panic") {
		t.Fatalf("node 3 panicked:\n%s", out)
	}
	t.Logf("node 3: %s", last)
	refusedOnP := false
	for i := 0; i < 2; i++ {
		if strings.Contains(readFile(t, c.nodes[i].logPath), "refused an RPC from another cluster") {
			refusedOnP = true
		}
	}
	if !refusedOnP {
		t.Fatal("neither of P's nodes logged the refusal of the foreign node's RPCs")
	}
	// P serves its own data with two of its three nodes.
	db, err := client.Open(ctx, c.addrs[:2])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c.eventually("read P's key", func() error {
		ctx, cancel := context.WithTimeout(ctx, opMax)
		defer cancel()
		v, ok, err := db.Get(ctx, []byte("cluster"))
		if err != nil {
			return err
		}
		if !ok || string(v) != "P" {
			t.Fatalf("P's key reads %q (found %v), want P", v, ok)
		}
		return nil
	})
	c.eventually("write in P", func() error {
		ctx, cancel := context.WithTimeout(ctx, opMax)
		defer cancel()
		return db.Put(ctx, []byte("after"), []byte("x"))
	})
}
