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
