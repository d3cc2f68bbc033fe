package kvserver

import (
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// TestPreferredLeaderOf: the leader preference wins where the node holds a
// replica; elsewhere, and with no preference, leaders spread by range ID.
func TestPreferredLeaderOf(t *testing.T) {
	var n Node
	for _, tc := range []struct {
		pref uint64
		d    *rpcpb.RangeDescriptor
		want uint64
	}{
		{0, descOn(4, 1, 2, 3), 2}, // spread: Replicas[4 % 3]
		{3, descOn(4, 1, 2, 3), 3},
		{1, descOn(5, 1, 2, 3), 1},
		{7, descOn(5, 1, 2, 3), 3}, // no replica on node 7: spread
		{2, descOn(1), 0},          // no replicas at all
	} {
		n.leaderPreference.Store(tc.pref)
		if got := n.preferredLeaderOf(tc.d); got != tc.want {
			t.Errorf("preference %d, range %d on %v: %d, want %d", tc.pref, tc.d.RangeId, tc.d.Replicas, got, tc.want)
		}
	}
}

// TestOracleNodeFirstHand: under the oracle placement, a node without a
// replica of range 1 places leases on the node that last answered as range
// 1's leaseholder, notices when that answer names another node (so that
// balance sweeps), and keeps range 1 and ranges without a voter there out of
// it.
func TestOracleNodeFirstHand(t *testing.T) {
	all := func(uint64) bool { return true }
	var n Node
	if got := n.oracleNode(); got != 0 {
		t.Fatalf("oracleNode with nothing known = %d, want 0", got)
	}
	n.noteOracleHost(3)
	if got := n.placedLeader(descOn(4, 1, 2, 3), all); got != 0 {
		t.Fatalf("placedLeader under spread = %d, want 0 (no say)", got)
	}
	if n.noteOracleMove() {
		t.Fatal("noteOracleMove under spread reported a move")
	}
	n.setLeasePlacement("oracle")
	for _, tc := range []struct {
		d    *rpcpb.RangeDescriptor
		want uint64
	}{
		{descOn(4, 1, 2, 3), 3},
		{descOn(5, 1, 2, 3), 3},
		{descOn(OracleRangeID, 1, 2, 3), 0}, // range 1 keeps its position
		{descOn(6, 1, 2, 4), 0},             // no voter on the host: spread
	} {
		if got := n.placedLeader(tc.d, all); got != tc.want {
			t.Errorf("placedLeader(r%d %v) = %d, want %d", tc.d.RangeId, voters(tc.d), got, tc.want)
		}
	}
	if got := n.placedLeader(descOn(4, 1, 2, 3), func(id uint64) bool { return id != 3 }); got != 0 {
		t.Errorf("placedLeader with the host unable to lead = %d, want 0", got)
	}
	if !n.noteOracleMove() || n.noteOracleMove() {
		t.Fatal("noteOracleMove: want a move on the first look only")
	}
	n.noteOracleHost(2)
	if !n.noteOracleMove() {
		t.Fatal("noteOracleMove: the host moved to n2, not reported")
	}
	// An answer naming this node itself is not used: it no longer holds
	// range 1's lease (it holds no replica of range 1 here at all).
	n.mu.nodeID = 5
	n.noteOracleHost(5)
	if got := n.oracleNode(); got != 0 {
		t.Errorf("oracleNode with only its own old answer = %d, want 0", got)
	}
	n.noteOracleHost(2)
	n.forgetOracleHost(3) // another node's failure leaves n2's answer
	if got := n.oracleNode(); got != 2 {
		t.Errorf("oracleNode after forgetting n3 = %d, want 2", got)
	}
	n.forgetOracleHost(2)
	if got := n.oracleNode(); got != 0 {
		t.Errorf("oracleNode after forgetting n2 = %d, want 0", got)
	}
	n.noteOracleHost(2)
	// A hierarchy cluster keeps spread whatever the setting.
	n.mu.settings = &rpcpb.ClusterSettings{CommitProtocol: "hierarchy-locking"}
	if got := n.placedLeader(descOn(4, 1, 2, 3), all); got != 0 {
		t.Errorf("placedLeader on a hierarchy cluster = %d, want 0 (spread)", got)
	}
	n.mu.settings = nil
	// An old answer is still the best this node knows without range 1.
	n.leases.host.Store(&oracleAnswer{node: 2, at: time.Unix(1, 0)})
	if got := n.oracleNode(); got != 2 {
		t.Fatalf("oracleNode with an old answer = %d, want 2", got)
	}
}

// descOn is a descriptor of rangeID with a voter on each of nodes.
func descOn(rangeID uint64, nodes ...uint64) *rpcpb.RangeDescriptor {
	d := &rpcpb.RangeDescriptor{RangeId: rangeID}
	for _, id := range nodes {
		d.Replicas = append(d.Replicas, &rpcpb.ReplicaDescriptor{NodeId: id})
	}
	return d
}
