package kvserver

import "github.com/canopy-db/canopy/internal/rpc/rpcpb"

// testingHooks are called at points where a test needs to order two
// goroutines of a node (set by tests of this package's directory through
// export_test.go, before any node starts; nil otherwise).
var testingHooks struct {
	// descLoaded: newReplicaLocked read the descriptor of rangeID (nil:
	// uninitialized) and has yet to read its Raft state.
	descLoaded func(n *Node, rangeID uint64, desc *rpcpb.RangeDescriptor)
	// beforeSplit: a split creating range rightID is about to apply here.
	beforeSplit func(n *Node, rightID uint64)
	// dropRaft: n drops an incoming Raft message of rangeID (its replica
	// hears nothing of the range) while it returns true.
	dropRaft func(n *Node, rangeID uint64) bool
	// feedStep: a rangefeed of rangeID reached step: "span-checked" (its
	// span is inside the range's descriptor; next it waits for the lease
	// and gets the processor), "processor-installed" (feedProcessor
	// installed a new processor, not yet initialized, holding the range's
	// feed initMu), "before-register" (it has an initialized processor and
	// is about to take its catch-up snapshot and register).
	feedStep func(n *Node, rangeID uint64, step string)
}
