package clusterstatus

import (
	"fmt"
	"strings"

	"github.com/canopy-db/canopy/internal/hierarchy"
)

// HierarchyJSON is the validator tree of a cluster running a hierarchy
// protocol (issue 9): its written form, where each inner validator runs
// (the lowest-ID node below it among those that answered, as the nodes
// compute it from their liveness), and the batching.
type HierarchyJSON struct {
	Tree string `json:"tree"`
	// InnerHosts lists "v<id>@n<node>" for each inner validator, root
	// first.
	InnerHosts              []string `json:"inner_hosts"`
	ValidatorBatchSize      uint32   `json:"validator_batch_size"`
	ValidatorBatchTimeoutUs uint64   `json:"validator_batch_timeout_us"`
	NodeBatchSize           uint32   `json:"node_batch_size"`
	NodeBatchTimeoutUs      uint64   `json:"node_batch_timeout_us"`
}

// Hierarchy describes the cluster's validator tree; nil if it runs no
// hierarchy protocol.
func (r *Report) Hierarchy() *HierarchyJSON {
	h := r.Settings.GetHierarchy()
	if h == nil {
		return nil
	}
	out := &HierarchyJSON{Tree: h.GetTree(), InnerHosts: []string{},
		ValidatorBatchSize: h.GetValidatorBatchSize(), ValidatorBatchTimeoutUs: h.GetValidatorBatchTimeoutUs(),
		NodeBatchSize: h.GetNodeBatchSize(), NodeBatchTimeoutUs: h.GetNodeBatchTimeoutUs()}
	t, err := hierarchy.ParseTree(h.GetTree())
	if err != nil {
		return out
	}
	live := map[uint64]bool{}
	for _, n := range r.Nodes {
		live[n.Desc.GetNodeId()] = n.Status != nil
	}
	for id := hierarchy.ValidatorID(0); int(id) < t.Size(); id++ {
		if t.IsLeaf(id) {
			continue
		}
		nodes := t.Nodes(id)
		host := nodes[0]
		for _, nd := range nodes {
			if live[uint64(nd)] {
				host = nd
				break
			}
		}
		out.InnerHosts = append(out.InnerHosts, fmt.Sprintf("v%d@n%d", id, host))
	}
	return out
}

// HierarchyLine is the one-line summary of Hierarchy for the status
// table ("" if none).
func (r *Report) HierarchyLine() string {
	h := r.Hierarchy()
	if h == nil {
		return ""
	}
	return fmt.Sprintf("validator tree %s, inner validators %s; batches: votes %d per message or %dµs, decisions %d per message or %dµs",
		h.Tree, strings.Join(h.InnerHosts, " "), h.ValidatorBatchSize, h.ValidatorBatchTimeoutUs, h.NodeBatchSize, h.NodeBatchTimeoutUs)
}
