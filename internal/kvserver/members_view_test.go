package kvserver_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestMembersFromLeaseholder: a node whose replica of range 1 hears
// nothing of the range (removed from it without learning it, or cut off
// from its leader) must still learn a change of membership, its own
// decommission included. Its replica's members are frozen as they were:
// read locally, the node sees itself active for ever, keeps its leases
// and never drains (the stall the membership nemesis found; 843bd9b).
// Only range 1's leaseholder reads them locally; every other node asks it.
//
// Range 1's messages to one follower are dropped (the testing hook), the
// follower is decommissioned, and its own view of itself must turn
// DECOMMISSIONING. Before the fix it stayed ACTIVE.
func TestMembersFromLeaseholder(t *testing.T) {
	var cutOff atomic.Uint64 // the node whose range-1 messages are dropped
	restore := kvserver.SetDropRaft(func(n *kvserver.Node, rangeID uint64) bool {
		return rangeID == kvserver.OracleRangeID && n.NodeID() == cutOff.Load()
	})
	defer restore()
	c, err := testcluster.Start(testcluster.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	leader := c.LeaderOf(kvserver.OracleRangeID)
	if leader < 0 {
		t.Fatal("range 1 has no leader")
	}
	follower := (leader + 1) % 3
	fn := c.Node(follower)
	id := fn.NodeID()
	cutOff.Store(id)
	t.Logf("range 1 led by n%d; its messages to n%d are dropped", c.Node(leader).NodeID(), id)

	rc := newRaw(t, c.Addrs())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	decommission(ctx, t, rc.conns[c.Addrs()[leader]], id)
	// The other nodes see it at once or at their next refresh; the cut-off
	// node too, once it reads the members from the leaseholder.
	for {
		var stale []string
		for i := range c.Addrs() {
			if m := c.Node(i).MembershipOf(id); m != rpcpb.NodeMembership_DECOMMISSIONING {
				stale = append(stale, fmt.Sprintf("n%d sees n%d %v", c.Node(i).NodeID(), id, m))
			}
		}
		if len(stale) == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("after n%d's decommission (range 1's messages to it dropped): %v", id, stale)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// decommission marks node id DECOMMISSIONING through conn, trying again
// until it is accepted or ctx ends.
func decommission(ctx context.Context, t *testing.T, conn rpcpb.KVClient, id uint64) {
	t.Helper()
	for {
		resp, err := conn.ChangeMembership(ctx, &rpcpb.ChangeMembershipRequest{NodeId: id, Membership: rpcpb.NodeMembership_DECOMMISSIONING})
		if err == nil && resp.Error == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("decommission n%d: %v %v", id, err, resp.GetError())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
