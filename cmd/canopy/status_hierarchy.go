package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/canopy-db/canopy/internal/commitprotocol"
	"github.com/canopy-db/canopy/internal/hierarchy"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// hierarchyFlags are init's flags for the hierarchy protocols (issue 9).
type hierarchyFlags struct {
	tree         string
	batchSize    int
	batchTimeout time.Duration
}

func (h *hierarchyFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&h.tree, "hierarchy-tree", "", `hierarchy-*: the validator tree, nested groups of node IDs, e.g. "((1 2 3 4) (5 6 7 8))" (default: one leaf per node under one root)`)
	cmd.Flags().IntVar(&h.batchSize, "hierarchy-batch-size", 1, fmt.Sprintf("hierarchy-*: votes per message up the tree and decisions per message to a node (1: no batching; at most %d)", hierarchy.BatchSizeMaxMax))
	cmd.Flags().DurationVar(&h.batchTimeout, "hierarchy-batch-timeout", hierarchy.DefaultBatchTimeout, fmt.Sprintf("hierarchy-*: how long a batch that has not filled up waits (at most %v)", hierarchy.BatchTimeoutMax))
}

// settings returns the hierarchy settings for protocol cp (nil for the
// other protocols, which refuse the hierarchy flags).
func (h *hierarchyFlags) settings(cmd *cobra.Command, cp commitprotocol.Name) (*rpcpb.HierarchySettings, error) {
	set := cmd.Flags().Changed("hierarchy-tree") || cmd.Flags().Changed("hierarchy-batch-size") || cmd.Flags().Changed("hierarchy-batch-timeout")
	if cp != commitprotocol.HierarchyLocking && cp != commitprotocol.HierarchyTimestamps {
		if set {
			return nil, fmt.Errorf("--hierarchy-* flags are for --commit-protocol hierarchy-locking or hierarchy-timestamps, not %s", cp)
		}
		return nil, nil
	}
	if h.tree != "" {
		if _, err := hierarchy.ParseTree(h.tree); err != nil {
			return nil, fmt.Errorf("--hierarchy-tree: %v", err)
		}
	}
	if h.batchSize < 1 || h.batchSize > hierarchy.BatchSizeMaxMax {
		return nil, fmt.Errorf("--hierarchy-batch-size %d: want 1 to %d", h.batchSize, hierarchy.BatchSizeMaxMax)
	}
	if h.batchTimeout <= 0 || h.batchTimeout > hierarchy.BatchTimeoutMax || h.batchTimeout%time.Microsecond != 0 {
		return nil, fmt.Errorf("--hierarchy-batch-timeout %v: want whole microseconds in (0, %v]", h.batchTimeout, hierarchy.BatchTimeoutMax)
	}
	us := uint64(h.batchTimeout / time.Microsecond)
	return &rpcpb.HierarchySettings{Tree: h.tree, ValidatorBatchSize: uint32(h.batchSize), ValidatorBatchTimeoutUs: us,
		NodeBatchSize: uint32(h.batchSize), NodeBatchTimeoutUs: us}, nil
}

// hierarchyBatching describes a cluster's batching (init, status).
func hierarchyBatching(h *rpcpb.HierarchySettings) string {
	return fmt.Sprintf("batches: votes %d per message or %v, decisions %d per message or %v",
		h.ValidatorBatchSize, time.Duration(h.ValidatorBatchTimeoutUs)*time.Microsecond,
		h.NodeBatchSize, time.Duration(h.NodeBatchTimeoutUs)*time.Microsecond)
}
