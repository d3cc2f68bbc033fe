package commitprotocol

import (
	"errors"
	"fmt"
	"strings"
)

// Name is a commit protocol's name, as `canopy init --commit-protocol`
// takes it and ClusterSettings.commit_protocol stores it.
type Name string

// The protocols. Default is also what an empty name means.
const (
	Default             Name = "default"
	TwoPCLocking        Name = "2pc-locking"
	HierarchyLocking    Name = "hierarchy-locking"
	HierarchyTimestamps Name = "hierarchy-timestamps"
)

// All lists every protocol, built or not, in the order help texts give.
var All = []Name{Default, TwoPCLocking, HierarchyLocking, HierarchyTimestamps}

// built says which protocols exist on both sides (init refuses the
// others).
var built = map[Name]bool{Default: true, TwoPCLocking: true, HierarchyLocking: true, HierarchyTimestamps: true}

// ErrUnknown is returned by Parse for a name that is not a protocol, and
// ErrNotBuilt for one whose implementation does not exist yet.
var (
	ErrUnknown  = errors.New("commitprotocol: unknown commit protocol")
	ErrNotBuilt = errors.New("commitprotocol: commit protocol not built yet")
)

// Parse returns the protocol named s ("" is Default). It does not check
// that the protocol is built; Check does.
func Parse(s string) (Name, error) {
	if s == "" {
		return Default, nil
	}
	for _, n := range All {
		if string(n) == s {
			return n, nil
		}
	}
	return "", fmt.Errorf("%w %q: want one of %s", ErrUnknown, s, strings.Join(Names(), ", "))
}

// Check returns Parse(s), or ErrNotBuilt if that protocol has no
// implementation yet.
func Check(s string) (Name, error) {
	n, err := Parse(s)
	if err != nil {
		return "", err
	}
	if !n.Built() {
		return "", fmt.Errorf("%w: %q", ErrNotBuilt, n)
	}
	return n, nil
}

// Built reports whether the protocol has an implementation.
func (n Name) Built() bool { return built[n] }

// Hierarchy reports whether n is one of the hierarchy protocols, whose
// leaf validators decide transactions at the node holding their data.
func (n Name) Hierarchy() bool { return n == HierarchyLocking || n == HierarchyTimestamps }

// Names returns All as strings.
func Names() []string {
	out := make([]string, len(All))
	for i, n := range All {
		out[i] = string(n)
	}
	return out
}

// Of returns the protocol of a stored or sent name: "" is Default. An
// unknown name is returned as is (the caller refuses it).
func Of(s string) Name {
	if s == "" {
		return Default
	}
	return Name(s)
}
