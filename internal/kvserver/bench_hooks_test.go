package kvserver

import (
	"testing"

	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// TestPreferredLeaderOf: the leader preference wins where the node holds a
// replica; elsewhere, and with no preference, leaders spread by range ID.
func TestPreferredLeaderOf(t *testing.T) {
	desc := func(rangeID uint64, nodes ...uint64) *rpcpb.RangeDescriptor {
		d := &rpcpb.RangeDescriptor{RangeId: rangeID}
		for _, id := range nodes {
			d.Replicas = append(d.Replicas, &rpcpb.ReplicaDescriptor{NodeId: id})
		}
		return d
	}
	var n Node
	for _, tc := range []struct {
		pref uint64
		d    *rpcpb.RangeDescriptor
		want uint64
	}{
		{0, desc(4, 1, 2, 3), 2}, // spread: Replicas[4 % 3]
		{3, desc(4, 1, 2, 3), 3},
		{1, desc(5, 1, 2, 3), 1},
		{7, desc(5, 1, 2, 3), 3}, // no replica on node 7: spread
		{2, desc(1), 0},          // no replicas at all
	} {
		n.leaderPreference.Store(tc.pref)
		if got := n.preferredLeaderOf(tc.d); got != tc.want {
			t.Errorf("preference %d, range %d on %v: %d, want %d", tc.pref, tc.d.RangeId, tc.d.Replicas, got, tc.want)
		}
	}
}
