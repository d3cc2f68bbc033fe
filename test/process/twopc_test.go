package process

import (
	"context"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/client"
)

// TestTwoPCCluster: `canopy init --commit-protocol 2pc-locking` on real
// processes; `canopy status` names the protocol; transactions run through
// the CLI and the Go client; a node killed with SIGKILL and restarted
// leaves every acknowledged write readable. An unknown protocol is
// refused by init with exit status 2, before any node is contacted.
func TestTwoPCCluster(t *testing.T) {
	needBinary(t)
	c := newCluster(t, 3)
	_, err := c.cli("init", "--host", c.addrs[0], "--commit-protocol", "3pc")
	if err == nil || !strings.Contains(err.Error(), "exit status 2") || !strings.Contains(err.Error(), "unknown commit protocol") {
		t.Fatalf("init --commit-protocol 3pc: %v, want exit status 2 naming an unknown commit protocol", err)
	}
	c.mustCLI("init", "--host", c.addrs[0], "--initial-ranges", "3", "--commit-protocol", "2pc-locking")
	// (Status may still say degraded while ranges elect leaders: its first
	// line names the protocol either way.)
	if out := c.waitLive(3); !strings.Contains(out, "commit protocol 2pc-locking") {
		t.Fatalf("status does not name the protocol:\n%s", out)
	}
	out := c.mustCLI("txn", c.hostFlag(), "put a 1", "put z 26", "get a")
	if !strings.Contains(out, "a\t1") {
		t.Fatalf("txn output: %q", out)
	}

	ctx := context.Background()
	db, err := client.Open(ctx, c.addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.Protocol() != client.Protocol2PCLocking {
		t.Fatalf("client sees protocol %q", db.Protocol())
	}
	acked := map[string]string{}
	put := func(k, v string) {
		t.Helper()
		err := db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
			if _, _, err := txn.Get(ctx, []byte(k)); err != nil {
				return err
			}
			return txn.Put(ctx, []byte(k), []byte(v))
		})
		if err == nil {
			acked[k] = v
		}
	}
	for _, k := range []string{"b", "m", "y"} {
		put(k, "before")
	}
	c.kill9(1)
	for _, k := range []string{"b", "m", "y", "c"} {
		put(k, "during")
	}
	c.start(1)
	c.waitLive(3)
	for _, k := range []string{"b", "n"} {
		put(k, "after")
	}
	c.readBack(db, "after the restart", acked)
}
