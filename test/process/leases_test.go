package process

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/client"
)

// TestLeasePlacementOracle: the lease placement cluster setting, set from
// the CLI on a three-node cluster of real processes. With "oracle", every
// range's lease moves to the node that holds range 1's lease (the oracle's
// host) while a writer runs; when that node is killed, the leases follow
// range 1's new leaseholder; with "spread" they spread again. A bad value
// is refused with a message naming the values. Every acknowledged write is
// read back at the end (the nodes verify their key caches: TestMain).
func TestLeasePlacementOracle(t *testing.T) {
	needBinary(t)
	c := newCluster(t, 3)
	c.mustCLI("init", "--host", c.addrs[0], "--initial-ranges", "6")
	c.waitLive(3)
	if out := c.mustCLI("admin", "setting", c.hostFlag()); !strings.Contains(out, "lease_placement=spread") {
		t.Fatalf("canopy admin setting printed %q, want lease_placement=spread (the default)", out)
	}
	out, err := c.cli("admin", "setting", c.hostFlag(), "--lease-placement=nearest")
	if err == nil || !strings.Contains(out+err.Error(), "want spread or oracle") {
		t.Fatalf("canopy admin setting --lease-placement=nearest: %v, %q; want a usage error naming the values", err, out)
	}

	ctx := context.Background()
	db, err := client.Open(ctx, c.addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.SetLeasePlacement(ctx, "nearest"); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("SetLeasePlacement(nearest) = %v, want InvalidArgument", err)
	}
	acked, stopWriter := startWriter(t, db)
	defer stopWriter()
	c.waitAcked(acked, "first writes", 50)

	if out := c.mustCLI("admin", "setting", c.hostFlag(), "--lease-placement=oracle"); !strings.Contains(out, "lease_placement=oracle") {
		t.Fatalf("canopy admin setting --lease-placement=oracle printed %q", out)
	}
	host := waitLeasesWithOracle(c, db, "after the setting")
	t.Logf("every lease on n%d", host)
	// A range split off one the host leads is led by the host too.
	before, err := leaseholders(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Split(ctx, []byte("leases-split-point")); err != nil {
		t.Fatalf("split under oracle placement: %v", err)
	}
	if lh := waitLeasesWithOracle(c, db, "after a split"); lh != host {
		t.Fatalf("after a split every lease is on n%d, before it on n%d", lh, host)
	}
	after, err := leaseholders(db)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) <= len(before) {
		t.Fatalf("the split added no range: %d ranges before, %d after", len(before), len(after))
	}
	if out := c.waitLive(3); !strings.Contains(out, "lease placement oracle") {
		t.Fatalf("canopy status does not show the lease placement:\n%s", out)
	}

	// Kill range 1's leaseholder: the leases follow its successor.
	killed := -1
	info, err := db.ClusterInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range info.Nodes {
		if nd.NodeId == host {
			killed = c.index(nd.Address)
		}
	}
	if killed < 0 {
		t.Fatalf("the oracle's host n%d is not among the cluster's nodes %v", host, info.Nodes)
	}
	c.kill9(killed)
	atKill := acked.count()
	c.waitAcked(acked, "writes after the oracle host was killed", atKill+50)
	if again := waitLeasesWithOracle(c, db, "after the kill"); again == host {
		t.Fatalf("range 1's lease still on the killed node n%d", host)
	}
	c.start(killed)
	c.waitLive(3)
	c.waitAcked(acked, "writes after the restart", acked.count()+50)
	waitLeasesWithOracle(c, db, "after the restart")

	// Back to spread: the leases leave the one node.
	c.mustCLI("admin", "setting", c.hostFlag(), "--lease-placement=spread")
	c.eventually("leases on more than one node after --lease-placement=spread", func() error {
		lh, err := leaseholders(db)
		if err != nil {
			return err
		}
		nodes := map[uint64]bool{}
		for _, n := range lh {
			nodes[n] = true
		}
		if len(nodes) < 3 {
			return fmt.Errorf("leaseholders by range: %v", lh)
		}
		return nil
	})
	c.waitAcked(acked, "writes after going back to spread", acked.count()+50)
	stopWriter()
	acked.mu.Lock()
	defer acked.mu.Unlock()
	c.readBack(db, "at the end", acked.values)
	t.Logf("%d writes acknowledged, %d attempts failed and were retried", acked.acks, acked.failures)
}

// leaseholders returns each range's leaseholder node (0: none known).
func leaseholders(db *client.DB) (map[uint64]uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opMax)
	defer cancel()
	ranges, err := db.Ranges(ctx)
	if err != nil {
		return nil, err
	}
	out := map[uint64]uint64{}
	for _, r := range ranges {
		out[r.Desc.RangeId] = r.LeaseholderNodeID
	}
	return out, nil
}

// waitLeasesWithOracle waits until every range's leaseholder is range 1's
// and returns that node.
func waitLeasesWithOracle(c *cluster, db *client.DB, when string) uint64 {
	c.t.Helper()
	var host uint64
	c.eventually("every lease with range 1's "+when, func() error {
		lh, err := leaseholders(db)
		if err != nil {
			return err
		}
		host = lh[1]
		var off []string
		for id, n := range lh {
			if n != host || n == 0 {
				off = append(off, fmt.Sprintf("r%d on n%d", id, n))
			}
		}
		if host == 0 || len(off) > 0 {
			sort.Strings(off)
			return fmt.Errorf("range 1's leaseholder n%d; elsewhere: %v", host, off)
		}
		return nil
	})
	return host
}
