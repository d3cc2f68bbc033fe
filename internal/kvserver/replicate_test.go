package kvserver

import (
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// TestStuckLearners: a learner that is not ready is waited for until
// LearnerCatchUpMax has passed since it was first seen not ready, then
// reported stuck (and the allocator removes it); a ready learner is never
// stuck, and its wait starts again if it falls behind later.
func TestStuckLearners(t *testing.T) {
	defer func(old time.Duration) { LearnerCatchUpMax = old }(LearnerCatchUpMax)
	LearnerCatchUpMax = 20 * time.Millisecond
	n := &Node{}
	d := &rpcpb.RangeDescriptor{RangeId: 7, Replicas: []*rpcpb.ReplicaDescriptor{
		{NodeId: 1, ReplicaId: 1}, {NodeId: 2, ReplicaId: 2}, {NodeId: 4, ReplicaId: 3, Type: rpcpb.ReplicaType_LEARNER},
	}}
	notReady, ready := replica.Status{}, replica.Status{LearnersReplicating: []uint64{4}}
	if got := n.stuckLearners(d, notReady); len(got) != 0 {
		t.Fatalf("first look: stuck %v", got)
	}
	if got := n.stuckLearners(d, ready); len(got) != 0 {
		t.Fatalf("ready: stuck %v", got)
	}
	if got := n.stuckLearners(d, notReady); len(got) != 0 {
		t.Fatalf("not ready again, its wait starting over: stuck %v", got)
	}
	time.Sleep(2 * LearnerCatchUpMax)
	if got := n.stuckLearners(d, notReady); len(got) != 1 || got[0] != 4 {
		t.Fatalf("after LearnerCatchUpMax: stuck %v, want [4]", got)
	}
}
