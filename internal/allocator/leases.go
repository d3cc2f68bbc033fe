package allocator

import "fmt"

// LeasePlacement is the cluster setting that says where ranges' leases
// go (docs/design-notes.md, "Lease placement"). It is stored as its name
// in range 1 (keys.LeasePlacementKey); an absent key is
// LeasePlacementSpread.
type LeasePlacement string

const (
	// LeasePlacementSpread: each range's lease goes to the voter at its
	// preferred position, the range ID modulo the number of voters, so
	// the leases of many ranges spread over the nodes. The default.
	LeasePlacementSpread LeasePlacement = "spread"
	// LeasePlacementOracle: every range's lease goes to the node that
	// holds range 1's lease (the oracle's host), where that node holds a
	// voter of the range and may take the lease; range 1 keeps its
	// preferred position. A write then takes its timestamp without a
	// round trip between nodes, at the price of one node evaluating every
	// request: what a single Raft group (etcd) does.
	LeasePlacementOracle LeasePlacement = "oracle"
)

// ParseLeasePlacement parses a setting's value; the empty string is the
// default (spread).
func ParseLeasePlacement(s string) (LeasePlacement, error) {
	switch p := LeasePlacement(s); p {
	case "":
		return LeasePlacementSpread, nil
	case LeasePlacementSpread, LeasePlacementOracle:
		return p, nil
	}
	return "", fmt.Errorf("lease placement %q: want %q or %q", s, LeasePlacementSpread, LeasePlacementOracle)
}

// AppliedLeasePlacement is the placement nodes carry out under setting:
// the setting, except that a cluster running a hierarchy protocol keeps
// spread (a leaf fences a range's commits after its lease moves, and
// decides local transactions where their data is).
func AppliedLeasePlacement(setting LeasePlacement, hierarchy bool) LeasePlacement {
	if hierarchy {
		return LeasePlacementSpread
	}
	return setting
}
