package kvserver

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/canopy-db/canopy/internal/eval"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Cluster membership.
//
// The members are the node records in range 1 (keys.NodeKey: a NodeRecord
// each), written at bootstrap and then only by two Raft commands of range
// 1, evaluated where they apply, identically on every replica:
//
//   - AddNodeCommand gives a store a node ID (the highest ever recorded + 1:
//     records are never deleted, so an ID is never reused) and records it.
//     An address held by a member that is not REMOVED is refused unless
//     the same store asks again (NodeRecord.store_id), so a wiped store
//     restarted on a member's address can never take that member's place
//     (it would vote and acknowledge with a log it no longer has).
//   - SetMembershipCommand moves a node to DECOMMISSIONING (the replicate
//     queue moves its replicas and leases away), back to ACTIVE, or to
//     REMOVED, which is refused while a meta record lists a replica on it.
//
// Every node reads the records (and, from the meta records, how many
// replicas each node holds) every MembersRefreshInterval: from its own
// replica of range 1 if it has one (a record is at most as stale as that
// replica), else from another node (Members RPC). So a node learns the
// address of a node that joined, and the replicate queue the membership
// and replica counts it places replicas by.
//
// Joining a running cluster: a node started with an empty store and
// --join asks the nodes listed there (AddNode, with the random ID of its
// store) until one that belongs to a cluster gives it a node ID; it then
// joins with no replicas, and the replicate queues of the leaseholders
// give it replicas (learners, then voters). `canopy node add ADDR` does
// the same from the operator's side: the cluster sends the Join to ADDR.

// Membership defaults.
const (
	// DefaultMembersRefreshInterval: see Config.MembersRefreshInterval.
	DefaultMembersRefreshInterval = 2 * time.Second
	// DefaultDeadNodeTimeout: see Config.DeadNodeTimeout (CockroachDB's
	// server.time_until_store_dead).
	DefaultDeadNodeTimeout = 5 * time.Minute
	// DeadNodeTimeoutMin bounds Config.DeadNodeTimeout from below: a node
	// must be given several election timeouts to come back before its
	// replicas are rebuilt elsewhere.
	DeadNodeTimeoutMin = 5 * time.Second
	// JoinRetryInterval is how often a node with an empty store asks the
	// --join addresses to let it join a running cluster.
	JoinRetryInterval = time.Second
	// RemoveListRangesMax bounds how many ranges a refused removal names.
	RemoveListRangesMax = 10
)

// storeIDKey holds the random ID of this store, made at its first start.
var storeIDKey = storage.NodeLocalKey("store-id")

// decodeNodeRecord decodes the node record of nodeID. Stores written
// before records were protobufs hold the bare address there.
func decodeNodeRecord(nodeID uint64, v []byte) *rpcpb.NodeRecord {
	var rec rpcpb.NodeRecord
	if err := proto.Unmarshal(v, &rec); err == nil && rec.NodeId == nodeID && rec.Address != "" {
		return &rec
	}
	return &rpcpb.NodeRecord{NodeId: nodeID, Address: string(v)}
}

// scanNodeRecords reads every node record from r (range 1's data).
func scanNodeRecords(r storage.Reader) ([]*rpcpb.NodeRecord, error) {
	end := append(append([]byte(nil), keys.NodePrefix...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	kvs, _, err := mvcc.ScanPlain(r, keys.NodePrefix, end, 0)
	if err != nil {
		return nil, err
	}
	var out []*rpcpb.NodeRecord
	for _, kv := range kvs {
		if len(kv.Key) != len(keys.NodePrefix)+8 {
			continue
		}
		id := binary.BigEndian.Uint64(kv.Key[len(keys.NodePrefix):])
		out = append(out, decodeNodeRecord(id, kv.Value))
	}
	return out, nil
}

// scanMetaRecords reads every meta record from r (range 1's data).
func scanMetaRecords(r storage.Reader) ([]*rpcpb.RangeDescriptor, error) {
	kvs, _, err := mvcc.ScanPlain(r, keys.MetaPrefix, keys.MetaEnd, 0)
	if err != nil {
		return nil, err
	}
	out := make([]*rpcpb.RangeDescriptor, 0, len(kvs))
	for _, kv := range kvs {
		d := &rpcpb.RangeDescriptor{}
		if err := proto.Unmarshal(kv.Value, d); err != nil {
			return nil, fmt.Errorf("kvserver: meta record %q: %v: %w", kv.Key, err, storage.ErrCorruption)
		}
		out = append(out, d)
	}
	return out, nil
}

func putNodeRecord(w storage.Writer, rec *rpcpb.NodeRecord) error {
	v, err := proto.Marshal(rec)
	if err != nil {
		return err
	}
	return mvcc.PutPlain(w, keys.NodeKey(rec.NodeId), v)
}

// nodeIDResult is the result of an AddNodeCommand that applied.
type nodeIDResult uint64

// applyAddNode applies an AddNodeCommand (range 1).
func (s *rangeSM) applyAddNode(b *storage.Batch, desc *rpcpb.RangeDescriptor, c *rpcpb.AddNodeCommand) (any, func()) {
	fail := func(code rpcpb.ErrorCode, format string, args ...any) (any, func()) {
		return &rpcpb.BatchResponse{Error: pbErr(code, format, args...)}, nil
	}
	if !eval.ContainsKey(desc, keys.NodePrefix) {
		return fail(rpcpb.ErrorCode_RANGE_KEY_MISMATCH, "node records are outside r%d", s.rangeID)
	}
	recs, err := scanNodeRecords(b)
	if err != nil {
		panic(err)
	}
	var top uint64
	for _, r := range recs {
		top = max(top, r.NodeId)
		if r.Address != c.Address || r.Membership == rpcpb.NodeMembership_REMOVED {
			continue
		}
		if c.StoreId != "" && r.StoreId == c.StoreId {
			return nodeIDResult(r.NodeId), nil // the same store asking again
		}
		return fail(rpcpb.ErrorCode_INVALID_ARGUMENT,
			"address %s belongs to node n%d (%s): a node that lost its store cannot come back as itself; "+
				"decommission and remove n%d (canopy node decommission %d; canopy node remove %d) or start the new node on another address",
			c.Address, r.NodeId, strings.ToLower(r.Membership.String()), r.NodeId, r.NodeId, r.NodeId)
	}
	rec := &rpcpb.NodeRecord{NodeId: top + 1, Address: c.Address, StoreId: c.StoreId}
	if err := putNodeRecord(b, rec); err != nil {
		panic(err)
	}
	return nodeIDResult(rec.NodeId), nil
}

// applySetMembership applies a SetMembershipCommand (range 1).
func (s *rangeSM) applySetMembership(b *storage.Batch, desc *rpcpb.RangeDescriptor, c *rpcpb.SetMembershipCommand) (any, func()) {
	fail := func(code rpcpb.ErrorCode, format string, args ...any) (any, func()) {
		return &rpcpb.BatchResponse{Error: pbErr(code, format, args...)}, nil
	}
	if !eval.ContainsKey(desc, keys.NodePrefix) {
		return fail(rpcpb.ErrorCode_RANGE_KEY_MISMATCH, "node records are outside r%d", s.rangeID)
	}
	v, found, err := mvcc.GetPlain(b, keys.NodeKey(c.NodeId))
	if err != nil {
		panic(err)
	}
	if !found {
		return fail(rpcpb.ErrorCode_INVALID_ARGUMENT, "node n%d is not a member of this cluster", c.NodeId)
	}
	rec := decodeNodeRecord(c.NodeId, v)
	switch {
	case rec.Membership == rpcpb.NodeMembership_REMOVED && c.Membership != rpcpb.NodeMembership_REMOVED:
		return fail(rpcpb.ErrorCode_INVALID_ARGUMENT, "node n%d was removed; a removed node never comes back (start a new node with an empty store)", c.NodeId)
	case c.Membership == rpcpb.NodeMembership_REMOVED:
		metas, err := scanMetaRecords(b)
		if err != nil {
			panic(err)
		}
		var held []string
		for _, d := range metas {
			if replicaOn(d, c.NodeId) != nil {
				held = append(held, fmt.Sprintf("r%d", d.RangeId))
			}
		}
		if count := len(held); count > 0 {
			more := ""
			if count > RemoveListRangesMax {
				more = fmt.Sprintf(" and %d more", count-RemoveListRangesMax)
				held = held[:RemoveListRangesMax]
			}
			return fail(rpcpb.ErrorCode_INVALID_ARGUMENT,
				"node n%d still holds %d replicas (%s%s): decommission it first (canopy node decommission %d) and wait until it holds none",
				c.NodeId, count, strings.Join(held, ", "), more, c.NodeId)
		}
	}
	rec.Membership = c.Membership
	if err := putNodeRecord(b, rec); err != nil {
		panic(err)
	}
	return rec, nil
}

// members is the node's view of the cluster's members (refreshMembers).
type members struct {
	// byID: every member's record and replica count, as last read.
	byID map[uint64]*rpcpb.MemberInfo
	// at: when it was read (zero: never).
	at time.Time
}

// membership returns the membership of nodeID as last read (ACTIVE if
// unknown: a node not yet read about is treated as a member).
func (n *Node) membership(nodeID uint64) rpcpb.NodeMembership {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if m := n.mu.members.byID[nodeID]; m != nil {
		return m.Node.GetMembership()
	}
	return rpcpb.NodeMembership_ACTIVE
}

// membersSnapshot returns the members as last read, by node ID.
func (n *Node) membersSnapshot() (map[uint64]*rpcpb.MemberInfo, time.Time) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mu.members.byID, n.mu.members.at
}

// readMembers reads the members, and the lease placement setting (empty
// when unset) kept beside them in range 1: from this node's replica of
// range 1 if it holds range 1's lease, else from range 1's leader or any
// other node.
//
// Only the leaseholder's replica is known to be current. A follower's may
// be one that was removed from range 1 without learning it (it stops
// receiving entries, and a quiescent one is not even ticked): read
// locally, its members stayed as they were at its removal. That froze a
// decommissioned node's view of itself as active, so it kept a lease and
// its replicas, and `Members` answered with its stale replica counts
// (docs/RELIABILITY.md, "Membership changes under load").
func (n *Node) readMembers(ctx context.Context) ([]*rpcpb.MemberInfo, string, error) {
	if rr := n.r1Leaseholder(); rr != nil {
		return n.membersLocal(rr)
	}
	targets := []uint64{n.r1Leader()}
	for _, nd := range n.nodeList() {
		targets = append(targets, nd.NodeId)
	}
	var last error = errors.New("no other node known")
	for _, id := range targets {
		if id == 0 || id == n.NodeID() {
			continue
		}
		cl, err := n.kvClient(id)
		if err != nil {
			last = err
			continue
		}
		actx, cancel := context.WithTimeout(ctx, n.electionTimeout())
		resp, err := cl.Members(actx, &rpcpb.MembersRequest{})
		cancel()
		if err != nil {
			last = err
			continue
		}
		if resp.Error != nil {
			last = errorf(resp.Error)
			continue
		}
		n.noteOracleHost(id) // only range 1's leaseholder answers a node (Members)
		return resp.Members, resp.LeasePlacement, nil
	}
	return nil, "", last
}

// membersLocal returns membersFrom(n.eng) and the lease placement setting,
// read again only when rr, this node's replica of range 1 (which holds the
// node and meta records), has applied something since the last read: the
// scan reads every meta record, and was a fifth of an idle node's CPU at
// 10,000 ranges, every MembersRefreshInterval. The applied index is the
// published one, which the engine's state is at or past when it is read,
// so a cached result is at most as stale as that publication. The slice
// is shared: callers do not modify it.
func (n *Node) membersLocal(rr *rangeReplica) ([]*rpcpb.MemberInfo, string, error) {
	applied := rr.r.Status().Applied
	c := &n.localMembers
	c.Lock()
	defer c.Unlock()
	if c.ms != nil && c.applied == applied {
		return c.ms, c.placement, nil
	}
	ms, err := membersFrom(n.eng)
	if err != nil {
		return nil, "", err
	}
	p, _, err := mvcc.GetPlain(n.eng, keys.LeasePlacementKey)
	if err != nil {
		return nil, "", err
	}
	c.applied, c.ms, c.placement = applied, ms, string(p)
	return ms, c.placement, nil
}

// membersFrom computes the members from range 1's data in r.
func membersFrom(r storage.Reader) ([]*rpcpb.MemberInfo, error) {
	recs, err := scanNodeRecords(r)
	if err != nil {
		return nil, err
	}
	metas, err := scanMetaRecords(r)
	if err != nil {
		return nil, err
	}
	counts := map[uint64]uint32{}
	for _, d := range metas {
		for _, rd := range d.Replicas {
			counts[rd.NodeId]++
		}
	}
	out := make([]*rpcpb.MemberInfo, 0, len(recs))
	for _, rec := range recs {
		out = append(out, &rpcpb.MemberInfo{Node: rec, Replicas: counts[rec.NodeId]})
	}
	return out, nil
}

// refreshMembers reads the members and updates the node's addresses and
// its view of membership.
func (n *Node) refreshMembers() {
	if !n.bootstrapped() {
		return
	}
	ctx, cancel := context.WithTimeout(n.stopCtx, n.cfg.RequestTimeout)
	defer cancel()
	ms, placement, err := n.readMembers(ctx)
	if err != nil {
		n.log.Debug("reading the cluster's members", "err", err)
		return
	}
	n.setLeasePlacement(placement) // placement.go
	byID := make(map[uint64]*rpcpb.MemberInfo, len(ms))
	self := n.NodeID()
	n.mu.Lock()
	for _, m := range ms {
		rec := m.Node
		byID[rec.NodeId] = m
		if rec.NodeId == self || rec.Address == "" {
			continue
		}
		if old, ok := n.mu.nodes[rec.NodeId]; !ok || old != rec.Address {
			n.mu.nodes[rec.NodeId] = rec.Address
		}
	}
	if me := byID[self]; me != nil && me.Node.Membership == rpcpb.NodeMembership_REMOVED &&
		n.mu.members.byID[self].GetNode().GetMembership() != rpcpb.NodeMembership_REMOVED {
		n.log.Error("this node was removed from the cluster: it takes no part in it any more; stop it and wipe its store", "node", self)
	}
	n.mu.members = members{byID: byID, at: time.Now()}
	n.mu.Unlock()
}

// Members implements rpcpb.KVServer.
func (s *kvService) Members(ctx context.Context, _ *rpcpb.MembersRequest) (*rpcpb.MembersResponse, error) {
	n := s.n
	if !n.bootstrapped() {
		return &rpcpb.MembersResponse{Error: pbErr(rpcpb.ErrorCode_NOT_BOOTSTRAPPED, "node is not part of a cluster yet: run canopy init")}, nil
	}
	rr := n.r1Leaseholder()
	if rr == nil {
		// Asked by a node while this one does not hold range 1's lease,
		// or by a client: forward (readMembers says why).
		if fromNode(ctx) {
			return &rpcpb.MembersResponse{Error: pbErr(rpcpb.ErrorCode_NOT_LEASEHOLDER, "node n%d does not hold the lease of range 1", n.NodeID())}, nil
		}
		ms, placement, err := n.readMembers(ctx)
		if err != nil {
			return &rpcpb.MembersResponse{Error: pbErr(rpcpb.ErrorCode_UNAVAILABLE, "reading the members: %v", err)}, nil
		}
		return &rpcpb.MembersResponse{Members: ms, LeasePlacement: placement}, nil
	}
	ms, placement, err := n.membersLocal(rr)
	if err != nil {
		return &rpcpb.MembersResponse{Error: pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err)}, nil
	}
	return &rpcpb.MembersResponse{Members: ms, LeasePlacement: placement}, nil
}

// AddNode implements rpcpb.KVServer.
func (s *kvService) AddNode(ctx context.Context, req *rpcpb.AddNodeRequest) (*rpcpb.AddNodeResponse, error) {
	n := s.n
	fail := func(e *rpcpb.Error) (*rpcpb.AddNodeResponse, error) { return &rpcpb.AddNodeResponse{Error: e}, nil }
	if !n.bootstrapped() {
		return fail(pbErr(rpcpb.ErrorCode_NOT_BOOTSTRAPPED, "node is not part of a cluster yet: run canopy init"))
	}
	if _, _, err := net.SplitHostPort(req.Address); err != nil || req.Address == "" {
		return fail(pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "node address %q is not host:port: %v", req.Address, err))
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	storeID := req.StoreId
	if req.Deliver {
		// From an operator: the node's own store ID, so that the command
		// can be repeated.
		c, err := n.conn(req.Address)
		if err != nil {
			return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "dialing %s: %v", req.Address, err))
		}
		resp, err := rpcpb.NewInternalClient(c).Ping(ctx, &rpcpb.PingRequest{}, grpc.WaitForReady(true))
		if err != nil {
			return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "node %s is not reachable: %v", req.Address, err))
		}
		if resp.Bootstrapped {
			return fail(pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "node %s already belongs to a cluster (as n%d)", req.Address, resp.NodeId))
		}
		storeID = resp.StoreId
	}
	if storeID == "" {
		return fail(pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "the joining node's store has no store ID (is it running an older canopy?)"))
	}
	id, err := n.proposeRemoteValue(ctx, OracleRangeID, &rpcpb.RaftCommand{AddNode: &rpcpb.AddNodeCommand{Address: req.Address, StoreId: storeID}})
	if err != nil {
		var we wireError
		if errors.As(err, &we) {
			return fail(we.e)
		}
		return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "adding the node: %v", err))
	}
	n.refreshMembers()
	nodes := []*rpcpb.NodeDescriptor{{NodeId: id, Address: req.Address}}
	for _, nd := range n.nodeList() {
		if nd.NodeId != id && n.membership(nd.NodeId) != rpcpb.NodeMembership_REMOVED {
			nodes = append(nodes, nd)
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].NodeId < nodes[j].NodeId })
	join := &rpcpb.JoinRequest{NodeId: id, Nodes: nodes, Settings: n.settings()}
	if req.Deliver {
		c, err := n.conn(req.Address)
		if err != nil {
			return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "%v", err))
		}
		resp, err := rpcpb.NewInternalClient(c).Join(ctx, join)
		if err != nil {
			return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "joining %s: %v", req.Address, err))
		}
		if resp.Error != nil {
			return fail(resp.Error)
		}
	}
	n.log.Info("node added", "node", id, "address", req.Address)
	return &rpcpb.AddNodeResponse{Join: join}, nil
}

// ChangeMembership implements rpcpb.KVServer.
func (s *kvService) ChangeMembership(ctx context.Context, req *rpcpb.ChangeMembershipRequest) (*rpcpb.ChangeMembershipResponse, error) {
	n := s.n
	fail := func(e *rpcpb.Error) (*rpcpb.ChangeMembershipResponse, error) {
		return &rpcpb.ChangeMembershipResponse{Error: e}, nil
	}
	if !n.bootstrapped() {
		return fail(pbErr(rpcpb.ErrorCode_NOT_BOOTSTRAPPED, "node is not part of a cluster yet: run canopy init"))
	}
	if req.NodeId == 0 {
		return fail(pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "node ID 0 names no node"))
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RequestTimeout)
	defer cancel()
	if err := n.proposeRemote(ctx, OracleRangeID, &rpcpb.RaftCommand{SetMembership: &rpcpb.SetMembershipCommand{NodeId: req.NodeId, Membership: req.Membership}}); err != nil {
		var we wireError
		if errors.As(err, &we) {
			return fail(we.e)
		}
		return fail(pbErr(rpcpb.ErrorCode_UNAVAILABLE, "changing the membership of n%d: %v", req.NodeId, err))
	}
	n.refreshMembers()
	ms, _ := n.membersSnapshot()
	rec := ms[req.NodeId].GetNode()
	if rec == nil {
		rec = &rpcpb.NodeRecord{NodeId: req.NodeId, Membership: req.Membership}
	}
	n.log.Info("node membership changed", "node", req.NodeId, "membership", req.Membership.String())
	return &rpcpb.ChangeMembershipResponse{Node: rec}, nil
}

// loadStoreID returns the store's random ID, making it at the first start.
func (n *Node) loadStoreID() (string, error) {
	v, err := n.eng.Get(storeIDKey)
	if err == nil {
		return string(v), nil
	}
	if !errors.Is(err, storage.ErrNotFound) {
		return "", err
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	s := hex.EncodeToString(id[:])
	b := n.eng.NewWriteBatch()
	defer b.Close()
	if err := b.Set(storeIDKey, []byte(s)); err != nil {
		return "", err
	}
	return s, b.Commit(true)
}

// joinRunning asks the --join addresses, until the node is a member or
// stops, to let it join a running cluster (see the comment at the top).
// Nodes that answer but belong to no cluster yet are waiting for `canopy
// init`, as this one may be.
func (n *Node) joinRunning() {
	defer n.wg.Done()
	t := time.NewTicker(JoinRetryInterval)
	defer t.Stop()
	lastRefusal := ""
	for !n.bootstrapped() {
		for _, a := range n.cfg.Join {
			if a == "" || a == n.cfg.AdvertiseAddr || a == n.cfg.ListenAddr || n.bootstrapped() {
				continue
			}
			c, err := n.conn(a)
			if err != nil {
				continue
			}
			ctx, cancel := context.WithTimeout(n.stopCtx, n.electionTimeout())
			ping, err := rpcpb.NewInternalClient(c).Ping(ctx, &rpcpb.PingRequest{})
			if err != nil || !ping.Bootstrapped {
				cancel()
				continue
			}
			resp, err := rpcpb.NewKVClient(c).AddNode(ctx, &rpcpb.AddNodeRequest{Address: n.cfg.AdvertiseAddr, StoreId: n.storeID})
			cancel()
			if err != nil {
				continue
			}
			if resp.Error != nil {
				// During `canopy init` this node's address is a member
				// already and its Join is on the way: say so once.
				if msg := resp.Error.Message; msg != lastRefusal {
					lastRefusal = msg
					n.log.Warn("a running cluster refused to add this node (retrying)", "via", a, "err", msg)
				}
				continue
			}
			if e := n.join(resp.Join); e != nil {
				n.log.Error("joining the running cluster", "via", a, "err", e.Message)
				continue
			}
			n.log.Info("joined a running cluster", "node", resp.Join.NodeId, "cluster", resp.Join.Settings.GetClusterId(), "via", a)
			n.refreshMembers()
			return
		}
		select {
		case <-n.stopc:
			return
		case <-t.C:
		}
	}
}

// removedPeer reports whether nodeID is a removed node.
func (n *Node) removedPeer(nodeID uint64) bool {
	return nodeID != 0 && n.membership(nodeID) == rpcpb.NodeMembership_REMOVED
}

// r1Leaseholder returns this node's replica of range 1 if it holds the
// range's lease (its state is current), else nil.
func (n *Node) r1Leaseholder() *rangeReplica {
	if rr := n.replica(OracleRangeID); rr != nil && rr.sm.Desc() != nil && rr.r.Status().Leaseholder {
		return rr
	}
	return nil
}
