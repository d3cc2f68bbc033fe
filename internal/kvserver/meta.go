package kvserver

import (
	"bytes"
	"context"

	"github.com/canopy-db/canopy/internal/eval"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"google.golang.org/protobuf/proto"
)

// MetaHintsMax bounds how many leaseholder hints a meta read or write
// follows.
const MetaHintsMax = 5

// lookupMeta returns the descriptor of the range containing key, read from
// range 1 at its leaseholder (here or on another node).
//
// A node without a replica of range 1 (clusters of more nodes than the
// replication factor, or a node removed from range 1) asks the other
// nodes in turn, following their hints, as fetchTimestamps does; a lookup
// asked by another node is not passed on again, so asking cannot loop.
func (n *Node) lookupMeta(ctx context.Context, key []byte) (*rpcpb.RangeDescriptor, *rpcpb.Error) {
	if bytes.Compare(key, keys.MaxKey) >= 0 {
		return nil, pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "key %q is beyond the keyspace", key)
	}
	self := n.NodeID()
	others := n.r1Others(ctx)
	next := others.next
	target := n.r1Leader()
	var last *rpcpb.Error
	for hints := 0; hints < MetaHintsMax; {
		if (target == 0 || target == self) && n.replica(OracleRangeID) == nil {
			if target = next(); target == 0 {
				break
			}
		}
		if target == 0 || target == self {
			d, e := n.lookupMetaLocal(ctx, key)
			if e == nil {
				return d, nil
			}
			last = e
			if e.Code != rpcpb.ErrorCode_NOT_LEASEHOLDER || e.LeaseholderHint == 0 || e.LeaseholderHint == self {
				return nil, e
			}
			target = e.LeaseholderHint
			hints++
			continue
		}
		cl, err := n.kvClient(target)
		if err != nil {
			last = pbErr(rpcpb.ErrorCode_UNAVAILABLE, "%v", err)
			if target = next(); target != 0 {
				continue
			}
			return nil, last
		}
		// One attempt is bounded by an election timeout: range 1's
		// leaseholder stopped or cut off must not hold every lookup for
		// the whole request timeout.
		actx, cancel := context.WithTimeout(ctx, n.electionTimeout())
		resp, err := cl.RangeLookup(actx, &rpcpb.RangeLookupRequest{Key: key})
		cancel()
		if err != nil {
			// A descriptor from this node's own replica of range 1, maybe
			// stale, is better than waiting for range 1's election:
			// descriptors check themselves (the range a stale one names
			// answers RANGE_KEY_MISMATCH with its own, and the caller
			// looks up again), as CockroachDB's inconsistent meta reads.
			if d := n.lookupMetaStale(key); d != nil {
				return d, nil
			}
			last = pbErr(rpcpb.ErrorCode_UNAVAILABLE, "meta lookup on n%d: %v", target, err)
			if target = next(); target != 0 && ctx.Err() == nil {
				continue
			}
			return nil, last
		}
		if resp.Error == nil {
			return resp.Range, nil
		}
		last = resp.Error
		if resp.Error.Code != rpcpb.ErrorCode_NOT_LEASEHOLDER {
			return nil, resp.Error
		}
		if resp.Error.LeaseholderHint != 0 {
			target = resp.Error.LeaseholderHint
			hints++
		} else if target = next(); target == 0 {
			break
		}
	}
	if last == nil {
		last = pbErr(rpcpb.ErrorCode_NOT_LEASEHOLDER, "node n%d has no replica of range 1 (meta)", self)
	}
	return nil, last
}

// nodeQueue is the nodes still to ask, in order.
type nodeQueue struct{ ids []uint64 }

// next returns the next node to ask, 0 if none is left.
func (q *nodeQueue) next() uint64 {
	if len(q.ids) == 0 {
		return 0
	}
	id := q.ids[0]
	q.ids = q.ids[1:]
	return id
}

// r1Others returns the nodes a node without a replica of range 1 asks in
// turn to find range 1's leaseholder (clusters of more nodes than the
// replication factor, or a node removed from range 1): every other member
// not removed. Empty for a node with a replica of range 1 (it follows its
// replica's leader and the hints), and for a request another node sent
// (not passed on again, so asking cannot loop).
func (n *Node) r1Others(ctx context.Context) *nodeQueue {
	q := &nodeQueue{}
	if n.replica(OracleRangeID) != nil || fromNode(ctx) {
		return q
	}
	for _, nd := range n.nodeList() {
		if nd.NodeId != n.NodeID() && !n.removedPeer(nd.NodeId) {
			q.ids = append(q.ids, nd.NodeId)
		}
	}
	return q
}

func (n *Node) r1Leader() uint64 {
	if rr := n.replica(OracleRangeID); rr != nil {
		return rr.r.Status().Leader
	}
	return 0
}

// lookupMetaLocal reads the descriptor of the range containing key at
// this node, which must lead range 1: by its lease if that is valid
// before and after the read (as readOnce serves a read), else after a
// ReadIndex round. Before, every lookup cost a ReadIndex round.
func (n *Node) lookupMetaLocal(ctx context.Context, key []byte) (*rpcpb.RangeDescriptor, *rpcpb.Error) {
	rr := n.replica(OracleRangeID)
	if rr == nil {
		return nil, pbErr(rpcpb.ErrorCode_NOT_LEASEHOLDER, "node n%d has no replica of range 1 (meta)", n.NodeID())
	}
	if !rr.r.Status().IsLeader {
		return nil, n.notLeaseholder(rr)
	}
	var kvs []mvcc.KV
	if e := n.leaseRead(ctx, rr, func(replica.Status) (func(), *rpcpb.Error) {
		var err error
		if kvs, _, err = mvcc.ScanPlain(n.eng, keys.MetaLookupKey(key), keys.MetaEnd, 1); err != nil {
			return nil, pbErr(rpcpb.ErrorCode_INTERNAL, "meta scan: %v", err)
		}
		return nil, nil
	}); e != nil {
		return nil, e
	}
	if len(kvs) == 0 {
		return nil, pbErr(rpcpb.ErrorCode_INTERNAL, "no meta record covers key %q", key)
	}
	d := &rpcpb.RangeDescriptor{}
	if err := proto.Unmarshal(kvs[0].Value, d); err != nil {
		return nil, pbErr(rpcpb.ErrorCode_INTERNAL, "meta record: %v", err)
	}
	return d, nil
}

// lookupMetaStale reads the descriptor of the range containing key from
// this node's replica of range 1 as it stands, without asking its
// leaseholder: nil if there is none or it fails.
func (n *Node) lookupMetaStale(key []byte) *rpcpb.RangeDescriptor {
	if rr := n.replica(OracleRangeID); rr == nil || rr.sm.Desc() == nil {
		return nil
	}
	kvs, _, err := mvcc.ScanPlain(n.eng, keys.MetaLookupKey(key), keys.MetaEnd, 1)
	if err != nil || len(kvs) == 0 {
		return nil
	}
	d := &rpcpb.RangeDescriptor{}
	if proto.Unmarshal(kvs[0].Value, d) != nil || !eval.ContainsKey(d, key) {
		return nil
	}
	return d
}

// ensureMeta writes d's meta record if it differs from d.
func (n *Node) ensureMeta(ctx context.Context, d *rpcpb.RangeDescriptor) error {
	cur, e := n.lookupMeta(ctx, d.StartKey)
	if e == nil && proto.Equal(cur, d) {
		return nil
	}
	if e == nil && cur.RangeId != d.RangeId && cur.Generation > d.Generation {
		return nil // our descriptor is stale; a newer leader will fix meta
	}
	return n.proposeRemote(ctx, OracleRangeID, &rpcpb.RaftCommand{MetaUpdate: &rpcpb.MetaUpdateCommand{Range: d}})
}

// proposeRemote replicates cmd on rangeID at its leaseholder.
func (n *Node) proposeRemote(ctx context.Context, rangeID uint64, cmd *rpcpb.RaftCommand) error {
	_, err := n.proposeRemoteValue(ctx, rangeID, cmd)
	return err
}

// proposeRemoteValue is proposeRemote returning the command's value.
func (n *Node) proposeRemoteValue(ctx context.Context, rangeID uint64, cmd *rpcpb.RaftCommand) (uint64, error) {
	others := &nodeQueue{}
	if rangeID == OracleRangeID {
		others = n.r1Others(ctx)
	}
	target := uint64(0)
	if rr := n.replica(rangeID); rr != nil {
		target = rr.r.Status().Leader
	} else {
		target = others.next()
	}
	if target == 0 {
		target = n.NodeID()
	}
	var last error
	for hints := 0; hints < MetaHintsMax; {
		cl, err := n.internalClient(target)
		if err != nil {
			return 0, err
		}
		resp, err := cl.Propose(ctx, &rpcpb.ProposeRequest{RangeId: rangeID, Command: cmd})
		if err != nil {
			return 0, err // maybe proposed: not sent again
		}
		if resp.Error == nil {
			return resp.Value, nil
		}
		last = errorf(resp.Error)
		noHint := resp.Error.Code == rpcpb.ErrorCode_RANGE_NOT_FOUND ||
			(resp.Error.Code == rpcpb.ErrorCode_NOT_LEASEHOLDER && resp.Error.LeaseholderHint == 0)
		if noHint {
			// Not proposed there: ask the next node, if any.
			if target = others.next(); target != 0 {
				continue
			}
			return 0, last
		}
		if resp.Error.Code != rpcpb.ErrorCode_NOT_LEASEHOLDER {
			return 0, last
		}
		target = resp.Error.LeaseholderHint
		hints++
	}
	return 0, last
}

type wireError struct{ e *rpcpb.Error }

func (w wireError) Error() string { return w.e.Code.String() + ": " + w.e.Message }

func errorf(e *rpcpb.Error) error { return wireError{e} }
