package kvserver

import "github.com/canopy-db/canopy/internal/rpc/rpcpb"

// SetTestingHooks sets testingHooks (testing_hooks.go) until restore is
// called. Call it before any node starts.
func SetTestingHooks(descLoaded func(n *Node, rangeID uint64, desc *rpcpb.RangeDescriptor), beforeSplit func(n *Node, rightID uint64)) (restore func()) {
	old := testingHooks
	testingHooks.descLoaded, testingHooks.beforeSplit = descLoaded, beforeSplit
	return func() { testingHooks = old }
}
