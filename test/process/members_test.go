package process

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// deadNodeTimeout is the nodes' --dead-node-timeout here: the smallest
// allowed, so that the test waits seconds, not the default 5 minutes.
const deadNodeTimeout = "5s"

// TestReplaceLostNode is the way back for a node whose store is lost
// (issue 13 items 3 and 6), on real processes under a write workload:
// three nodes; n3 is killed and its store wiped; removing n3 is refused
// while it holds replicas; a fresh node started with --join joins the
// running cluster as n4; the ranges that had a replica on n3 are rebuilt
// on n4 once n3 is dead past --dead-node-timeout (learners, snapshots,
// joint configurations); n3 is decommissioned and removed; every range is
// back to three voters, none on n3, `canopy status` shows no range under-
// replicated or unavailable, and every acknowledged write reads back.
// (--dead-node-timeout is 5 s here; it defaults to 5 minutes.)
// Last, the wiped store started again on n3's old address joins as a new
// node (n5) now that n3 is removed.
func TestReplaceLostNode(t *testing.T) {
	needBinary(t)
	args := []string{"--dead-node-timeout", deadNodeTimeout}
	c := newClusterWith(t, 3, args)
	c.mustCLI("init", "--host", c.addrs[0], "--initial-ranges", "3")
	c.waitLive(3)

	ctx := context.Background()
	db, err := client.Open(ctx, c.addrs[:2])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	acked, stopWriter := startWriter(t, db)
	defer stopWriter()
	waitAcked := func(what string, n int) { t.Helper(); c.waitAcked(acked, what, n) }
	waitAcked("first writes", 100)

	// n3 loses its store.
	c.kill9(2)
	if err := os.RemoveAll(c.nodes[2].store); err != nil {
		t.Fatal(err)
	}
	t.Logf("n3 killed and its store wiped, after %d acknowledged writes", acked.count())
	waitAcked("writes with n3 down", acked.count()+100)

	// Removing it now is refused: it still holds replicas.
	host := "--host=" + strings.Join(c.addrs[:2], ",")
	if _, err := c.cli("node", "remove", host, "3"); err == nil || !strings.Contains(err.Error(), "still holds") {
		t.Fatalf("canopy node remove 3 while n3 holds replicas: %v, want a refusal saying it still holds replicas", err)
	}

	// A fresh node joins the running cluster by itself.
	n4 := c.addSlot(args)
	c.start(n4)
	c.eventually("n4 a member", func() error {
		ms, err := db.Members(ctx)
		if err != nil {
			return err
		}
		if m := memberAt(ms, c.addrs[n4]); m == nil || m.Node.NodeId != 4 {
			return fmt.Errorf("members: %v", ms)
		}
		return nil
	})

	// n3 is dead past the timeout: its ranges are rebuilt on n4 (before
	// any decommission), and then the decommission and removal finish.
	c.eventually("every range on three voters, none on n3", func() error {
		return threeVotersWithout(ctx, db, 3)
	})
	c.mustCLI("node", "decommission", host, "3")
	c.eventually("canopy node remove 3", func() error {
		_, err := c.cli("node", "remove", host, "3")
		return err
	})
	out := c.mustCLI("node", "ls", host)
	if !strings.Contains(out, "removed") {
		t.Fatalf("canopy node ls does not show n3 removed:\n%s", out)
	}
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
	waitAcked("writes after the replacement", acked.count()+100)
	stopWriter()
	acked.mu.Lock()
	c.readBack(db, "after replacing n3", acked.values)
	acked.mu.Unlock()
	t.Logf("%d writes acknowledged, %d attempts failed and were retried", acked.acks, acked.failures)

	// The wiped store, started again on n3's address, joins as a new node
	// now that the address is free.
	c.start(2)
	c.eventually("the new store on n3's address a member", func() error {
		ms, err := db.Members(ctx)
		if err != nil {
			return err
		}
		if m := memberAt(ms, c.addrs[2]); m == nil || m.Node.NodeId != 5 {
			return fmt.Errorf("members: %v", ms)
		}
		return nil
	})
}

// memberAt returns the member at address that is not removed, nil if none.
func memberAt(ms []*rpcpb.MemberInfo, address string) *rpcpb.MemberInfo {
	for _, m := range ms {
		if m.Node.Address == address && m.Node.Membership != rpcpb.NodeMembership_REMOVED {
			return m
		}
	}
	return nil
}

// threeVotersWithout reports nil once every range's descriptor (meta) has
// three voters and no replica on node gone.
func threeVotersWithout(ctx context.Context, db *client.DB, gone uint64) error {
	ctx, cancel := context.WithTimeout(ctx, opMax)
	defer cancel()
	ranges, err := db.Ranges(ctx)
	if err != nil {
		return err
	}
	for _, r := range ranges {
		voters := 0
		for _, rep := range r.Desc.Replicas {
			if rep.NodeId == gone {
				return fmt.Errorf("r%d still has a replica on n%d: %v", r.Desc.RangeId, gone, r.Desc.Replicas)
			}
			if rep.Type == rpcpb.ReplicaType_VOTER {
				voters++
			}
		}
		if voters != 3 || len(r.Desc.Replicas) != 3 {
			return fmt.Errorf("r%d has replicas %v", r.Desc.RangeId, r.Desc.Replicas)
		}
	}
	return nil
}
