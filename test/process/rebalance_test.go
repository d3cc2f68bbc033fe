package process

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// TestAddNodeRebalances (issue 13, item 6: `canopy node add` and
// rebalancing onto an added node with no node dead), on real processes
// under a write workload: three nodes; a fourth is started with an empty
// store that joins nothing by itself (its --join names only itself), and
// `canopy node add ADDRESS` makes it a member; then, with every node live,
// the replicate queue moves replicas onto it (learner, snapshot, joint
// swap) and leases follow, until it holds replicas and at least one
// lease; every range keeps three voters, `canopy status` shows nothing
// under-replicated or unavailable, and every acknowledged write reads
// back.
func TestAddNodeRebalances(t *testing.T) {
	needBinary(t)
	c := newCluster(t, 3)
	c.mustCLI("init", "--host", c.addrs[0], "--initial-ranges", "6")
	c.waitLive(3)
	ctx := context.Background()
	db, err := client.Open(ctx, c.addrs[:3])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	acked, stopWriter := startWriter(t, db)
	defer stopWriter()
	waitAcked := func(what string, n int) { t.Helper(); c.waitAcked(acked, what, n) }
	waitAcked("first writes", 100)

	// The new node does not join by itself: only `node add` brings it in.
	host := "--host=" + strings.Join(c.addrs[:3], ",")
	n4 := c.addSlot(nil)
	c.nodes[n4].args = []string{"--join", c.addrs[n4]}
	c.start(n4)
	out := c.mustCLI("node", "add", host, c.addrs[n4])
	t.Logf("canopy node add %s: %s", c.addrs[n4], strings.TrimSpace(out))
	var id uint64
	c.eventually("n4 a member", func() error {
		ms, err := db.Members(ctx)
		if err != nil {
			return err
		}
		m := memberAt(ms, c.addrs[n4])
		if m == nil {
			return fmt.Errorf("members: %v", ms)
		}
		id = m.Node.NodeId
		return nil
	})

	// Replicas and leases move onto it, with no node dead.
	c.eventually("replicas and a lease on the new node", func() error {
		ctx, cancel := context.WithTimeout(ctx, opMax)
		defer cancel()
		ranges, err := db.Ranges(ctx)
		if err != nil {
			return err
		}
		replicas, leases := 0, 0
		for _, r := range ranges {
			voters := 0
			for _, rep := range r.Desc.Replicas {
				if rep.NodeId == id {
					replicas++
				}
				if rep.Type == rpcpb.ReplicaType_VOTER {
					voters++
				}
			}
			if voters != 3 {
				return fmt.Errorf("r%d has replicas %v", r.Desc.RangeId, r.Desc.Replicas)
			}
			if r.LeaseholderNodeID == id {
				leases++
			}
		}
		if replicas < 2 || leases < 1 {
			return fmt.Errorf("n%d holds %d replicas and %d leases of %d ranges", id, replicas, leases, len(ranges))
		}
		t.Logf("n%d holds %d replicas and %d leases of %d ranges", id, replicas, leases, len(ranges))
		return nil
	})
	c.eventually("canopy status: nothing under-replicated or unavailable", func() error {
		out, err := c.cli("status", host)
		if err != nil {
			return err
		}
		if !strings.Contains(out, "under-replicated ranges: 0\n") || !strings.Contains(out, "unavailable ranges: 0\n") {
			return fmt.Errorf("canopy status:\n%s", out)
		}
		return nil
	})
	waitAcked("writes after the rebalancing", acked.count()+100)
	stopWriter()
	acked.mu.Lock()
	c.readBack(db, "after adding n4", acked.values)
	acked.mu.Unlock()
	t.Logf("%d writes acknowledged, %d attempts failed and were retried", acked.acks, acked.failures)
}
