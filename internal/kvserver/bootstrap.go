package kvserver

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"github.com/canopy-db/canopy/internal/commitprotocol"
	"github.com/canopy-db/canopy/internal/eval"
	"strings"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/replica"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/txnstatus"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Bootstrap defaults.
const (
	DefaultReplicationFactor = 3
	// StatusRanges is how many ranges the status table is pre-split into.
	StatusRanges = 4
	// InitialRangesMax bounds --initial-ranges: every range is created at
	// bootstrap, its descriptor in one Join message to every node.
	InitialRangesMax           = 20000
	DefaultPartitioningQuantum = txnstatus.DefaultPartitioningQuantum
	DefaultRowsPerQuantum      = txnstatus.DefaultRowsPerQuantum
	// DefaultStatusEncoding is the status encoding of a cluster bootstrapped
	// without one: tickets-mix, which spreads Canopy's start timestamps
	// (wall ms << 18 + a per-ms counter, whose low bits are mostly small)
	// evenly over the status ranges where the record's plain tickets does
	// not (docs/BENCHMARKS.md, "Hot spots"). tickets and v1 stay
	// selectable. Clusters bootstrapped before it keep the encoding their
	// settings name (an empty one, from before encodings were recorded, is
	// tickets: client.statusEncodingFor).
	DefaultStatusEncoding = "tickets-mix"
)

// InitialLayout returns the ranges of a new cluster: the system ranges and
// userRanges ranges over the user keyspace, replicated on rf of the nodes.
func InitialLayout(nodeIDs []uint64, rf int, userRanges int) []*rpcpb.RangeDescriptor {
	var bounds [][]byte
	bounds = append(bounds, keys.MinKey, keys.HeartbeatPrefix, keys.StatusPrefix)
	bounds = append(bounds, keys.StatusSplitKeys(StatusRanges)...)
	bounds = append(bounds, keys.UserPrefix)
	bounds = append(bounds, keys.UserSplitKeys(userRanges)...)
	bounds = append(bounds, keys.MaxKey)
	var out []*rpcpb.RangeDescriptor
	for i := 0; i+1 < len(bounds); i++ {
		id := uint64(i + 1)
		d := &rpcpb.RangeDescriptor{RangeId: id, StartKey: bounds[i], EndKey: bounds[i+1]}
		for j := 0; j < rf && j < len(nodeIDs); j++ {
			d.Replicas = append(d.Replicas, &rpcpb.ReplicaDescriptor{NodeId: nodeIDs[(int(id)-1+j)%len(nodeIDs)]})
		}
		out = append(out, d)
	}
	return out
}

func (n *Node) bootstrap(ctx context.Context, req *rpcpb.BootstrapRequest) (*rpcpb.ClusterSettings, *rpcpb.Error) {
	n.bootstrapMu.Lock()
	defer n.bootstrapMu.Unlock()
	if n.bootstrapped() {
		return n.settings(), pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "the cluster is already initialized")
	}
	if req.InitialRanges == 0 {
		req.InitialRanges = 1
	}
	if req.InitialRanges > InitialRangesMax {
		return nil, pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "initial ranges %d exceeds InitialRangesMax (%d)", req.InitialRanges, InitialRangesMax)
	}
	addrs := []string{n.cfg.AdvertiseAddr}
	for _, a := range n.cfg.Join {
		if a != n.cfg.AdvertiseAddr && a != n.cfg.ListenAddr && a != "" {
			addrs = append(addrs, a)
		}
	}
	for _, a := range addrs[1:] {
		c, err := n.conn(a)
		if err != nil {
			return nil, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "dialing %s: %v", a, err)
		}
		// Wait for nodes that are still starting, within ctx.
		resp, err := rpcpb.NewInternalClient(c).Ping(ctx, &rpcpb.PingRequest{}, grpc.WaitForReady(true))
		if err != nil {
			return nil, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "node %s is not reachable: %v", a, err)
		}
		if resp.Bootstrapped {
			return nil, pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "node %s already belongs to a cluster", a)
		}
	}
	settings := proto.Clone(req.GetSettings()).(*rpcpb.ClusterSettings)
	if settings == nil {
		settings = &rpcpb.ClusterSettings{}
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	settings.ClusterId = hex.EncodeToString(id[:])
	if settings.StatusEncoding == "" {
		settings.StatusEncoding = DefaultStatusEncoding
	}
	if settings.TicketsPartitioningQuantum == 0 {
		settings.TicketsPartitioningQuantum = DefaultPartitioningQuantum
	}
	if settings.TicketsRowsPerQuantum == 0 {
		settings.TicketsRowsPerQuantum = DefaultRowsPerQuantum
	}
	if _, err := txnstatus.NewTickets(settings.TicketsPartitioningQuantum, settings.TicketsRowsPerQuantum); err != nil {
		return nil, pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "tickets encoding: %v", err)
	}
	if _, err := txnstatus.Named(settings.StatusEncoding, settings.TicketsPartitioningQuantum, settings.TicketsRowsPerQuantum); err != nil {
		return nil, pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "%v", err)
	}
	cp, perr := commitprotocol.Check(settings.CommitProtocol)
	if perr != nil {
		return nil, pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "%v", perr)
	}
	settings.CommitProtocol = string(cp)
	switch cp {
	case commitprotocol.HierarchyLocking, commitprotocol.HierarchyTimestamps:
		// The variant is the protocol's; the tree and batching are
		// filled in below, once the node IDs are known.
		if settings.Hierarchy == nil {
			settings.Hierarchy = &rpcpb.HierarchySettings{}
		}
		v := strings.TrimPrefix(string(cp), "hierarchy-")
		if settings.Hierarchy.Variant != "" && settings.Hierarchy.Variant != v {
			return nil, pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "hierarchy variant %q contradicts commit protocol %s", settings.Hierarchy.Variant, cp)
		}
		settings.Hierarchy.Variant = v
	default:
		if settings.Hierarchy != nil {
			return nil, pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "hierarchy settings given for commit protocol %s (they are for hierarchy-locking and hierarchy-timestamps)", cp)
		}
	}
	// Every cluster bootstrapped from now on can change its status
	// encoding at run time (txnstatus.Schedule).
	settings.StatusEncodingSchedule = true
	if settings.ReplicationFactor == 0 {
		settings.ReplicationFactor = DefaultReplicationFactor
	}
	if int(settings.ReplicationFactor) > len(addrs) {
		settings.ReplicationFactor = uint32(len(addrs))
	}
	var nodes []*rpcpb.NodeDescriptor
	var ids []uint64
	for i, a := range addrs {
		nodes = append(nodes, &rpcpb.NodeDescriptor{NodeId: uint64(i + 1), Address: a})
		ids = append(ids, uint64(i+1))
	}
	if h := settings.GetHierarchy(); h != nil {
		if err := ValidateHierarchySettings(h, ids); err != nil { // hierarchy.go
			return nil, pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "hierarchy settings: %v", err)
		}
	}
	ranges := InitialLayout(ids, int(settings.ReplicationFactor), int(req.InitialRanges))
	var data []*rpcpb.KeyValue
	for _, d := range ranges {
		v, _ := proto.Marshal(d)
		data = append(data, &rpcpb.KeyValue{Key: keys.MetaKey(d.EndKey), Value: v})
	}
	for _, nd := range nodes {
		rec, err := proto.Marshal(&rpcpb.NodeRecord{NodeId: nd.NodeId, Address: nd.Address})
		if err != nil {
			return nil, pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err)
		}
		data = append(data, &rpcpb.KeyValue{Key: keys.NodeKey(nd.NodeId), Value: rec})
	}
	data = append(data, &rpcpb.KeyValue{Key: keys.RangeIDKey, Value: binary.BigEndian.AppendUint64(nil, uint64(len(ranges)))})
	// The settings, replicated in range 1 (every node also keeps them with
	// its identity).
	sv, err := proto.Marshal(settings)
	if err != nil {
		return nil, pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err)
	}
	data = append(data, &rpcpb.KeyValue{Key: keys.ClusterSettingsKey, Value: sv})
	// Peers first, this node last: a failure leaves this node free to retry.
	for i := len(nodes) - 1; i >= 0; i-- {
		j := &rpcpb.JoinRequest{NodeId: nodes[i].NodeId, Nodes: nodes, Settings: settings, Ranges: ranges, InitialData: data}
		if i == 0 {
			if e := n.join(j); e != nil {
				return nil, e
			}
			continue
		}
		c, err := n.conn(nodes[i].Address)
		if err != nil {
			return nil, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "%v", err)
		}
		resp, err := rpcpb.NewInternalClient(c).Join(ctx, j)
		if err != nil {
			return nil, pbErr(rpcpb.ErrorCode_UNAVAILABLE, "joining %s: %v", nodes[i].Address, err)
		}
		if resp.Error != nil {
			return nil, resp.Error
		}
	}
	n.log.Info("cluster initialized", "cluster", settings.ClusterId, "nodes", len(nodes), "ranges", len(ranges),
		"replication_factor", settings.ReplicationFactor, "status_encoding", settings.StatusEncoding, "commit_protocol", settings.CommitProtocol)
	return settings, nil
}

// join makes this node a member: it persists its identity and creates
// its replicas of the initial ranges.
func (n *Node) join(req *rpcpb.JoinRequest) *rpcpb.Error {
	n.joinMu.Lock()
	defer n.joinMu.Unlock()
	if n.bootstrapped() {
		if s := n.settings(); s != nil && s.ClusterId == req.Settings.GetClusterId() && n.NodeID() == req.NodeId {
			return nil
		}
		return pbErr(rpcpb.ErrorCode_INVALID_ARGUMENT, "node already belongs to cluster %s", n.settings().GetClusterId())
	}
	b := n.eng.NewBatch()
	defer b.Close()
	var mine []*rpcpb.RangeDescriptor
	for _, d := range req.Ranges {
		member := false
		for _, r := range d.Replicas {
			member = member || r.NodeId == req.NodeId
		}
		if !member {
			continue
		}
		mine = append(mine, d)
		if err := writeDesc(b, d); err != nil {
			return pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err)
		}
		if err := replica.WriteInitialConfState(b, d.RangeId, confStateOf(d), raftpb.HardState{}); err != nil {
			return pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err)
		}
		if err := b.Set(registryKey(d.RangeId), nil); err != nil {
			return pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err)
		}
		for _, kv := range req.InitialData {
			if eval.ContainsKey(d, kv.Key) {
				if err := mvcc.PutPlain(b, kv.Key, kv.Value); err != nil {
					return pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err)
				}
			}
		}
	}
	ident, err := proto.Marshal(req)
	if err != nil {
		return pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err)
	}
	if err := b.Set(nodeIdentKey, ident); err != nil {
		return pbErr(rpcpb.ErrorCode_INTERNAL, "%v", err)
	}
	if err := b.Commit(true); err != nil {
		return pbErr(rpcpb.ErrorCode_INTERNAL, "persisting membership: %v", err)
	}
	n.setIdent(req)
	n.recordIdent(req) // storecheck.go
	for _, d := range mine {
		rr, err := n.newReplica(d.RangeId, d)
		if err != nil {
			return pbErr(rpcpb.ErrorCode_INTERNAL, "starting range r%d: %v", d.RangeId, err)
		}
		if preferredLeader(d) == req.NodeId {
			rr.r.Campaign()
		}
	}
	n.startProtocol() // protocol.go
	n.log.Info("joined the cluster", "cluster", req.Settings.GetClusterId(), "node", fmt.Sprintf("n%d", req.NodeId),
		"nodes", len(req.Nodes), "replicas", len(mine), "commit_protocol", commitprotocol.Of(req.Settings.GetCommitProtocol()))
	return nil
}
