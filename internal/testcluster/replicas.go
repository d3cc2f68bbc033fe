package testcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// Invariant I5 (DESIGN.md): every replica of a range that has applied the
// same index holds the same data.
//
// The check reads each replica from one engine snapshot of its node: the
// range's applied index (the replica writes it in the same batch as each
// entry's effects, see package replica, step 3) and a digest of every
// physical key and value in the range's data span. Both come from one
// point-in-time view, so an entry being applied concurrently can only move
// both together; two replicas with equal applied indexes and different
// digests are a real divergence, never a race of the check.
//
// Rejected: comparing the applied index of NodeStatus with a later scan of
// the live engine. An entry applied between the two reads makes healthy
// replicas look divergent, so such a check must wait for quiescence and
// still cannot be sure it saw it.

// ErrReplicasDiverged is returned by CheckReplicas when two replicas of a
// range applied the same index but hold different data (I5 is broken).
var ErrReplicasDiverged = errors.New("testcluster: replicas diverged (I5)")

// ReplicaState is one replica of a range as one engine snapshot of its node
// shows it.
type ReplicaState struct {
	Node    int    // 0-based node index
	Applied uint64 // Raft applied index recorded with the range's data
	Keys    int    // physical keys in the range's data span
	Digest  [sha256.Size]byte
}

// RangeDescriptors returns the newest descriptor of every range that a
// running node holds (highest generation wins), in key order.
func (c *Cluster) RangeDescriptors(ctx context.Context) ([]*rpcpb.RangeDescriptor, error) {
	byID := map[uint64]*rpcpb.RangeDescriptor{}
	for i := range c.addrs {
		n := c.Node(i)
		if n == nil {
			continue
		}
		st, err := n.Status(ctx)
		if err != nil {
			return nil, fmt.Errorf("status of node %d: %w", i+1, err)
		}
		for _, r := range st.Ranges {
			d := r.GetRange()
			if d == nil {
				continue
			}
			if old := byID[d.GetRangeId()]; old == nil || old.GetGeneration() < d.GetGeneration() {
				byID[d.GetRangeId()] = d
			}
		}
	}
	out := make([]*rpcpb.RangeDescriptor, 0, len(byID))
	for _, d := range byID {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].GetStartKey(), out[j].GetStartKey()) < 0 })
	return out, nil
}

// replicaView is one node's snapshot, open while a round of the check
// compares it with the others.
type replicaView struct {
	node int
	snap *storage.Snapshot
}

// appliedIndex reads rangeID's applied index from r (0 if the node has no
// replica of the range yet).
func appliedIndex(r storage.Reader, rangeID uint64) (uint64, error) {
	v, err := r.Get(storage.RangeLocalKey(rangeID, storage.SuffixApplied))
	if errors.Is(err, storage.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	// The record is (index, term), 8 bytes each, big endian (package
	// replica's encodeIndexTerm).
	if len(v) != 16 {
		return 0, fmt.Errorf("applied record of range %d is %d bytes, want 16: %w", rangeID, len(v), storage.ErrCorruption)
	}
	return binary.BigEndian.Uint64(v), nil
}

// readReplica computes one replica's state from a snapshot.
func readReplica(node int, r storage.Reader, d *rpcpb.RangeDescriptor) (ReplicaState, error) {
	st := ReplicaState{Node: node}
	var err error
	if st.Applied, err = appliedIndex(r, d.GetRangeId()); err != nil {
		return st, err
	}
	h := sha256.New()
	var lenBuf [8]byte
	err = mvcc.IterateSpan(r, d.GetStartKey(), d.GetEndKey(), func(k, v []byte) error {
		st.Keys++
		binary.BigEndian.PutUint32(lenBuf[:4], uint32(len(k)))
		binary.BigEndian.PutUint32(lenBuf[4:], uint32(len(v)))
		h.Write(lenBuf[:])
		h.Write(k)
		h.Write(v)
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("node %d, range %d: %w", node+1, d.GetRangeId(), err)
	}
	h.Sum(st.Digest[:0])
	return st, nil
}

// firstDifference describes where two replicas' data first differ, for the
// failure message.
func firstDifference(a, b storage.Reader, d *rpcpb.RangeDescriptor) string {
	type kv struct{ k, v string }
	read := func(r storage.Reader) []kv {
		var out []kv
		_ = mvcc.IterateSpan(r, d.GetStartKey(), d.GetEndKey(), func(k, v []byte) error {
			out = append(out, kv{string(k), string(v)})
			return nil
		})
		return out
	}
	x, y := read(a), read(b)
	for i := 0; i < len(x) || i < len(y); i++ {
		switch {
		case i >= len(x):
			return fmt.Sprintf("only the second has key %q", y[i].k)
		case i >= len(y):
			return fmt.Sprintf("only the first has key %q", x[i].k)
		case x[i].k != y[i].k:
			return fmt.Sprintf("key %q vs key %q at position %d", x[i].k, y[i].k, i)
		case x[i].v != y[i].v:
			return fmt.Sprintf("key %q: value %q vs %q", x[i].k, x[i].v, y[i].v)
		}
	}
	return "no difference on a second read"
}

// CheckReplicas checks invariant I5 on every range held by the running
// nodes. For each range it takes one engine snapshot of every node in the
// range's descriptor and compares the replicas: equal applied indexes with
// different data fail at once with ErrReplicasDiverged. Unequal applied
// indexes (a replica is catching up, or the workload still runs) are
// retried until ctx ends; then it fails, naming the ranges whose replicas
// never reached one applied index. Stop the workload first: under constant
// writes the replicas may never be seen at the same index.
//
// A node in a descriptor must be running for its range to be checked.
//
// It returns the number of ranges checked.
func (c *Cluster) CheckReplicas(ctx context.Context) (int, error) {
	descs, err := c.RangeDescriptors(ctx)
	if err != nil {
		return 0, err
	}
	pending := descs
	var lastLag []string
	for {
		var next []*rpcpb.RangeDescriptor
		lastLag = lastLag[:0]
		for _, d := range pending {
			lag, err := c.compareRange(d)
			if err != nil {
				return 0, err
			}
			if lag != "" {
				next = append(next, d)
				lastLag = append(lastLag, lag)
			}
		}
		if len(next) == 0 {
			return len(descs), nil
		}
		pending = next
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("testcluster: replicas did not reach one applied index before the deadline (%w): %s",
				ctx.Err(), strings.Join(lastLag, "; "))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// compareRange runs one round of CheckReplicas on range d. It returns a
// non-empty lag description when the replicas are not (yet) at one applied
// index, and an error wrapping ErrReplicasDiverged when they are and their
// data differ.
func (c *Cluster) compareRange(d *rpcpb.RangeDescriptor) (string, error) {
	var views []replicaView
	defer func() {
		for _, v := range views {
			v.snap.Close()
		}
	}()
	for _, rep := range d.GetReplicas() {
		i := int(rep.GetNodeId()) - 1
		if i < 0 || i >= len(c.addrs) {
			return "", fmt.Errorf("testcluster: range %d names node %d, not in this cluster", d.GetRangeId(), rep.GetNodeId())
		}
		n := c.Node(i)
		if n == nil {
			return fmt.Sprintf("r%d: node %d is stopped", d.GetRangeId(), i+1), nil
		}
		views = append(views, replicaView{node: i, snap: n.Engine().NewSnapshot()})
	}
	states := make([]ReplicaState, len(views))
	for j, v := range views {
		st, err := readReplica(v.node, v.snap, d)
		if err != nil {
			return "", err
		}
		states[j] = st
	}
	for j := 1; j < len(states); j++ {
		if states[j].Applied != states[0].Applied {
			var parts []string
			for _, s := range states {
				parts = append(parts, fmt.Sprintf("n%d@%d", s.Node+1, s.Applied))
			}
			return fmt.Sprintf("r%d applied %s", d.GetRangeId(), strings.Join(parts, " ")), nil
		}
	}
	for j := 1; j < len(states); j++ {
		if states[j].Digest != states[0].Digest {
			return "", fmt.Errorf("%w: range %d [%q, %q) at applied index %d: node %d has %d keys, node %d has %d keys; first difference: %s",
				ErrReplicasDiverged, d.GetRangeId(), d.GetStartKey(), d.GetEndKey(), states[0].Applied,
				states[0].Node+1, states[0].Keys, states[j].Node+1, states[j].Keys,
				firstDifference(views[0].snap, views[j].snap, d))
		}
	}
	return "", nil
}
