package testcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/testcluster"
)

// TestRoutingAroundPartitionedNode checks that a client whose first
// address is a partitioned node still reaches the cluster: the partitioned
// node answers range lookups with NOT_LEASEHOLDER and no hint (it knows no
// leader), and the client must move on to another node rather than ask it
// again until its attempts run out. (Found by TestBankManyFaults: while
// the meta range's former leader was partitioned, transfers failed with
// ErrUnavailable from range lookups that kept asking that node.)
func TestRoutingAroundPartitionedNode(t *testing.T) {
	c := startCluster(t, testcluster.Options{Nodes: 3})
	ctx, cancel := context.WithTimeout(context.Background(), setupDeadline)
	defer cancel()
	i := rangeLeaderPicker(t, c, kvserver.OracleRangeID, "meta and oracle")()
	setLinks(c, i, kvserver.LinkFault{Drop: true})
	// Wait until the partitioned node has stepped down and knows no leader
	// of the meta range (CheckQuorum), so that it answers NOT_LEASEHOLDER
	// without a hint, and until the other two have elected a new leader,
	// so that their hints are right (before that they may still name the
	// partitioned node, and a client with few attempts may spend them all
	// bouncing between stale hints: another matter than the one tested).
	for {
		st, err := c.Node(i).Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stepped := false
		// Every range, not only the meta range, must have a leader among
		// the other two: the Put below goes to a user range, whose
		// followers name the partitioned node until their own election.
		movedAll := true
		for _, r := range st.Ranges {
			rid := r.GetRange().GetRangeId()
			if rid == kvserver.OracleRangeID && r.LeaderNodeId == 0 {
				stepped = true
			}
			if l := c.LeaderOf(rid); l < 0 || l == i {
				movedAll = false
			}
		}
		if stepped && movedAll {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%v after the partition of n%d: it still names a leader of the meta range, or the others lead not every range", setupDeadline, i+1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	addrs := c.Addrs()
	addrs[0], addrs[i] = addrs[i], addrs[0] // the partitioned node first
	db, err := client.Open(ctx, addrs, client.WithOptions(client.Options{SendAttemptsMax: 5}))
	if err != nil {
		t.Fatalf("open with the partitioned node first: %v", err)
	}
	defer db.Close()
	if _, err := db.Ranges(ctx); err != nil {
		for j := range c.Addrs() {
			st, _ := c.Node(j).Status(ctx)
			for _, r := range st.GetRanges() {
				if r.GetRange().GetRangeId() == kvserver.OracleRangeID {
					t.Logf("n%d at %s: range %d leader n%d term %d", c.Node(j).NodeID(), c.Addrs()[j], kvserver.OracleRangeID, r.LeaderNodeId, r.RaftTerm)
				}
			}
		}
		t.Fatalf("listing ranges with the partitioned node n%d first: %v", i+1, err)
	}
	if err := db.Put(ctx, []byte("routing/k"), []byte("v")); err != nil {
		t.Fatalf("put with the partitioned node n%d first: %v", i+1, err)
	}
}
