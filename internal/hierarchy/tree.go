package hierarchy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// NodeID names a data node (Canopy's node ID).
type NodeID uint64

// ValidatorID names a validator within its Tree: validators are numbered
// breadth first from the root (0), children left to right.
type ValidatorID int32

// NoValidator is the parent of the root.
const NoValidator ValidatorID = -1

// TreeValidatorsMax bounds the size of a tree (validators of all levels).
const TreeValidatorsMax = 4096

// Tree is the shape of the validator hierarchy: which leaves sit with which
// data nodes and which validator is the parent of which. It is an immutable
// value; build it with ParseTree or DefaultTree and share it.
//
// Levels are counted from the leaves: a leaf is at level 0 and an inner
// validator one above its highest child, so in a balanced tree a level is a
// row of the tree. The level of the validator that decides a transaction is
// the thesis's H (formulas 3.3 and 3.4).
//
// Written form (String, ParseTree): a leaf is its data node's ID, an inner
// validator is its children in parentheses. "(1 2 3)" is a root over three
// leaves (the default for three nodes); "((1 2 3 4) (5 6 7 8))" is the
// three-level tree of the thesis's example 3.5.1.
type Tree struct {
	// v is indexed by ValidatorID.
	// Invariant: v[0] is the root; every validator's parent precedes it;
	// every data node has exactly one leaf.
	v []treeValidator
	// leafOf maps a data node to its leaf.
	leafOf map[NodeID]ValidatorID
	// leaves lists the leaves left to right; a leaf's position + 1 is its
	// round-robin slot in the timestamp variant (3.3.2).
	leaves []ValidatorID
}

type treeValidator struct {
	parent   ValidatorID
	children []ValidatorID
	node     NodeID // leaves only
	level    int
	// nodes are the data nodes below (a leaf: its own), sorted.
	nodes []NodeID
	// slot is a leaf's 1-based position among the leaves.
	slot int
}

// DefaultTree is one leaf per node under one root, the tree of the
// thesis's experiments (8 leaves, 1 root).
func DefaultTree(nodes []NodeID) (*Tree, error) {
	var b strings.Builder
	b.WriteByte('(')
	for i, n := range nodes {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatUint(uint64(n), 10))
	}
	b.WriteByte(')')
	return ParseTree(b.String())
}

// ParseTree reads the written form of a tree (see Tree). The root must be
// an inner validator (so "(1)" is the tree of a one-node cluster); every
// inner validator has at least one child; node IDs are non-zero and
// appear once. Errors wrap ErrInvalidArgument.
func ParseTree(s string) (*Tree, error) {
	p := &treeParser{s: s}
	type parsed struct {
		node     NodeID
		children []*parsed
	}
	var parse func(depth int) (*parsed, error)
	parse = func(depth int) (*parsed, error) {
		if depth > 64 {
			return nil, fmt.Errorf("%w: tree %q nests deeper than 64 levels", ErrInvalidArgument, s)
		}
		p.skipSpace()
		if p.eof() {
			return nil, fmt.Errorf("%w: tree %q ends early", ErrInvalidArgument, s)
		}
		if p.s[p.i] == '(' {
			p.i++
			n := &parsed{}
			for {
				p.skipSpace()
				if p.eof() {
					return nil, fmt.Errorf("%w: tree %q: missing ')'", ErrInvalidArgument, s)
				}
				if p.s[p.i] == ')' {
					p.i++
					break
				}
				c, err := parse(depth + 1)
				if err != nil {
					return nil, err
				}
				n.children = append(n.children, c)
			}
			if len(n.children) == 0 {
				return nil, fmt.Errorf("%w: tree %q has an inner validator without children", ErrInvalidArgument, s)
			}
			return n, nil
		}
		start := p.i
		for !p.eof() && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		id, err := strconv.ParseUint(p.s[start:p.i], 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("%w: tree %q: expected a non-zero node ID or '(' at offset %d", ErrInvalidArgument, s, start)
		}
		return &parsed{node: NodeID(id)}, nil
	}
	root, err := parse(0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if !p.eof() {
		return nil, fmt.Errorf("%w: tree %q: unexpected %q after the root", ErrInvalidArgument, s, p.s[p.i:])
	}
	if root.children == nil {
		return nil, fmt.Errorf("%w: tree %q: the root must be an inner validator, e.g. \"(%d)\"", ErrInvalidArgument, s, root.node)
	}
	t := &Tree{leafOf: map[NodeID]ValidatorID{}}
	// Breadth first, so that a parent precedes its children.
	type queued struct {
		p      *parsed
		parent ValidatorID
	}
	queue := []queued{{root, NoValidator}}
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		if len(t.v) >= TreeValidatorsMax {
			return nil, fmt.Errorf("%w: tree %q has more than %d validators", ErrInvalidArgument, s, TreeValidatorsMax)
		}
		id := ValidatorID(len(t.v))
		t.v = append(t.v, treeValidator{parent: q.parent, node: q.p.node})
		if q.parent != NoValidator {
			t.v[q.parent].children = append(t.v[q.parent].children, id)
		}
		if q.p.children == nil {
			if _, dup := t.leafOf[q.p.node]; dup {
				return nil, fmt.Errorf("%w: tree %q names node %d twice", ErrInvalidArgument, s, q.p.node)
			}
			t.leafOf[q.p.node] = id
		}
		for _, c := range q.p.children {
			queue = append(queue, queued{c, id})
		}
	}
	// Levels and covered nodes, children before parents.
	for id := len(t.v) - 1; id >= 0; id-- {
		v := &t.v[id]
		if len(v.children) == 0 {
			v.nodes = []NodeID{v.node}
			continue
		}
		for _, c := range v.children {
			v.level = max(v.level, t.v[c].level+1)
			v.nodes = append(v.nodes, t.v[c].nodes...)
		}
		slices.Sort(v.nodes)
	}
	// Leaves left to right (depth first), for the round-robin slots.
	var walk func(ValidatorID)
	walk = func(id ValidatorID) {
		if len(t.v[id].children) == 0 {
			t.leaves = append(t.leaves, id)
			t.v[id].slot = len(t.leaves)
			return
		}
		for _, c := range t.v[id].children {
			walk(c)
		}
	}
	walk(0)
	return t, nil
}

type treeParser struct {
	s string
	i int
}

func (p *treeParser) eof() bool { return p.i >= len(p.s) }
func (p *treeParser) skipSpace() {
	for !p.eof() && (p.s[p.i] == ' ' || p.s[p.i] == ',' || p.s[p.i] == '\t' || p.s[p.i] == '\n') {
		p.i++
	}
}

// String is the written form, which ParseTree reads back.
func (t *Tree) String() string {
	var b strings.Builder
	var write func(ValidatorID)
	write = func(id ValidatorID) {
		v := &t.v[id]
		if len(v.children) == 0 {
			b.WriteString(strconv.FormatUint(uint64(v.node), 10))
			return
		}
		b.WriteByte('(')
		for i, c := range v.children {
			if i > 0 {
				b.WriteByte(' ')
			}
			write(c)
		}
		b.WriteByte(')')
	}
	write(0)
	return b.String()
}

// Size is the number of validators.
func (t *Tree) Size() int { return len(t.v) }

// Root is the root validator (0).
func (t *Tree) Root() ValidatorID { return 0 }

// Valid reports whether id names a validator of t.
func (t *Tree) Valid(id ValidatorID) bool { return id >= 0 && int(id) < len(t.v) }

// Parent of id; NoValidator for the root.
func (t *Tree) Parent(id ValidatorID) ValidatorID { return t.v[id].parent }

// Children of id, left to right; none for a leaf. Do not modify.
func (t *Tree) Children(id ValidatorID) []ValidatorID { return t.v[id].children }

// IsLeaf reports whether id is a leaf.
func (t *Tree) IsLeaf(id ValidatorID) bool { return len(t.v[id].children) == 0 }

// Node is the data node a leaf sits with (0 for an inner validator).
func (t *Tree) Node(id ValidatorID) NodeID { return t.v[id].node }

// Level of id: 0 for a leaf, one above the highest child otherwise.
func (t *Tree) Level(id ValidatorID) int { return t.v[id].level }

// Levels lists the validators of each level, level 0 (the leaves) first.
func (t *Tree) Levels() [][]ValidatorID {
	levels := make([][]ValidatorID, t.v[0].level+1)
	for id := range t.v {
		l := t.v[id].level
		levels[l] = append(levels[l], ValidatorID(id))
	}
	return levels
}

// Nodes are the data nodes below id, sorted. Do not modify.
func (t *Tree) Nodes(id ValidatorID) []NodeID { return t.v[id].nodes }

// Leaf is the leaf of a data node, and false if the tree has none.
func (t *Tree) Leaf(n NodeID) (ValidatorID, bool) {
	id, ok := t.leafOf[n]
	return id, ok
}

// LeafCount is the number of leaves (the round-robin modulus of 3.3.2).
func (t *Tree) LeafCount() int { return len(t.leaves) }

// Slot is a leaf's 1-based position among the leaves, left to right: in
// the timestamp variant, leaf slot j owns the timestamps t with
// t mod LeafCount = j mod LeafCount (3.3.2: with 8 leaves the first owns
// 1, 9, 17, ..., the eighth 8, 16, ...).
func (t *Tree) Slot(id ValidatorID) int { return t.v[id].slot }

// covers reports whether n is below id.
func (t *Tree) covers(id ValidatorID, n NodeID) bool {
	_, found := slices.BinarySearch(t.v[id].nodes, n)
	return found
}

// childToward is the child of id whose subtree holds n (n must be below id).
func (t *Tree) childToward(id ValidatorID, n NodeID) ValidatorID {
	for _, c := range t.v[id].children {
		if t.covers(c, n) {
			return c
		}
	}
	panic(fmt.Sprintf("hierarchy: node %d is not below validator %d", n, id))
}

// Decider is the lowest validator that covers every node in nodes (the
// lowest common ancestor of their leaves): the validator that decides a
// transaction involving them. For one node it is that node's leaf. It
// returns false if some node has no leaf.
func (t *Tree) Decider(nodes []NodeID) (ValidatorID, bool) {
	if len(nodes) == 0 {
		return NoValidator, false
	}
	id, ok := t.leafOf[nodes[0]]
	if !ok {
		return NoValidator, false
	}
	for _, n := range nodes[1:] {
		if _, ok := t.leafOf[n]; !ok {
			return NoValidator, false
		}
		for !t.covers(id, n) {
			id = t.v[id].parent
		}
	}
	return id, true
}

// isAncestorOrSelf reports whether a is b or above b.
func (t *Tree) isAncestorOrSelf(a, b ValidatorID) bool {
	for ; b != NoValidator; b = t.v[b].parent {
		if b == a {
			return true
		}
	}
	return false
}
