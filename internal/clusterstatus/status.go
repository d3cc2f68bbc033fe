package clusterstatus

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/allocator"
	"github.com/canopy-db/canopy/internal/commitprotocol"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
)

// Node is one node as Gather saw it.
type Node struct {
	Desc   *rpcpb.NodeDescriptor
	Status *rpcpb.NodeStatusResponse // nil: unreachable
	Err    error                     // why Status is nil
	// Membership: active, decommissioning ("-" if unknown).
	Membership string
}

// LeaseholderOf counts the ranges n's node leads (the leaseholder is the
// leader).
func (n *Node) LeaseholderOf() int {
	if n.Status == nil {
		return 0
	}
	leads := 0
	for _, rs := range n.Status.Ranges {
		if rs.LeaderNodeId == n.Status.NodeId {
			leads++
		}
	}
	return leads
}

// Follower is one follower's progress, as its range's leader sees it.
type Follower struct {
	NodeID uint64
	// Lag in log entries behind the leader's last index.
	Lag uint64
	// State: Raft's progress state (replicate, probe, snapshot), or down
	// (its node does not answer).
	State string
	// Learner: a non-voting replica.
	Learner bool
	// OK: it takes the leader's appends (replicate, recently active, its
	// node answers).
	OK bool
}

// Range is one range as Gather saw it.
type Range struct {
	Info client.RangeInfo
	// UnderReplicated says why the range is under-replicated ("" if not);
	// Unavailable why it cannot commit (no leader on a live node, fewer
	// than a quorum of voters taking the leader's appends).
	UnderReplicated, Unavailable string
	// Followers, from the leader's status (nil if no live node leads it).
	Followers []Follower
	// Bytes estimates the range's size on disk, on its leader's store (0
	// if unknown).
	Bytes uint64
}

// Lag renders the followers' lag: "n2:0 n3:5(probe)", or "-".
func (r *Range) Lag() string {
	var parts []string
	for _, f := range r.Followers {
		p := fmt.Sprintf("n%d:%d", f.NodeID, f.Lag)
		if !f.OK {
			p += "(" + f.State + ")"
		}
		if f.Learner {
			p += "(learner)"
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// Report is the cluster's status at one moment.
type Report struct {
	Settings *rpcpb.ClusterSettings
	// LeasePlacement is the lease placement setting ("" if it could not
	// be read).
	LeasePlacement string
	Nodes          []Node
	Ranges         []Range
	// At is when the report was gathered.
	At time.Time
}

// Gather asks the cluster db reaches for its status.
func Gather(ctx context.Context, db *client.DB) (*Report, error) {
	info, err := db.ClusterInfo(ctx)
	if err != nil {
		return nil, err
	}
	r := &Report{Settings: info.Settings, At: time.Now()}
	if lp, err := db.LeasePlacement(ctx); err == nil {
		r.LeasePlacement = lp
	}
	membership := map[uint64]string{}
	if ms, err := db.Members(ctx); err == nil {
		for _, m := range ms {
			membership[m.Node.NodeId] = strings.ToLower(m.Node.Membership.String())
		}
	}
	live := map[uint64]bool{}
	// The leaders' view of each range (followers' progress).
	led := map[uint64]*rpcpb.RangeStatus{}
	for _, nd := range info.Nodes {
		m := membership[nd.NodeId]
		if m == "removed" {
			continue // out of the cluster for good (canopy node ls lists it)
		}
		if m == "" {
			m = "-"
		}
		st, err := db.NodeStatus(ctx, nd.Address)
		if err == nil && st.NodeId != nd.NodeId {
			// Another store answers at the address (wiped and not joined,
			// or joined as a new node): this node is not there.
			st, err = nil, fmt.Errorf("node n%d answers at %s instead", st.NodeId, nd.Address)
		}
		r.Nodes = append(r.Nodes, Node{Desc: nd, Status: st, Err: err, Membership: m})
		live[nd.NodeId] = err == nil
		if st != nil {
			for _, rs := range st.Ranges {
				if rs.LeaderNodeId == st.NodeId {
					led[rs.Range.GetRangeId()] = rs
				}
			}
		}
	}
	ranges, err := db.Ranges(ctx)
	if err != nil {
		return nil, err
	}
	rf := int(info.Settings.GetReplicationFactor())
	for _, ri := range ranges {
		rs := Range{Info: ri}
		var down []string
		for _, rep := range ri.Desc.Replicas {
			if !live[rep.NodeId] {
				down = append(down, fmt.Sprintf("n%d", rep.NodeId))
			}
		}
		leader := led[ri.Desc.RangeId]
		rs.Bytes = leader.GetApproxBytes()
		var health int
		var why string
		rs.Followers, health, why = rangeHealth(ri.Desc, leader, live, rf)
		switch {
		case health == healthUnavailable:
			rs.Unavailable = why
		case len(ri.Desc.Replicas) < rf:
			rs.UnderReplicated = fmt.Sprintf("%d of %d replicas", len(ri.Desc.Replicas), rf)
		case len(down) > 0:
			rs.UnderReplicated = "replica on unreachable " + strings.Join(down, ",")
		case health == healthUnder:
			rs.UnderReplicated = why
		}
		r.Ranges = append(r.Ranges, rs)
	}
	return r, nil
}

// Problems lists what makes the cluster degraded (none: healthy).
func (r *Report) Problems() []string {
	var out []string
	for _, n := range r.Nodes {
		if n.Status == nil {
			out = append(out, fmt.Sprintf("node n%d (%s) unreachable", n.Desc.NodeId, n.Desc.Address))
		}
	}
	under, unavailable := r.Counts()
	if under > 0 {
		out = append(out, fmt.Sprintf("%d of %d ranges under-replicated", under, len(r.Ranges)))
	}
	if unavailable > 0 {
		out = append(out, fmt.Sprintf("%d of %d ranges unavailable", unavailable, len(r.Ranges)))
	}
	return out
}

// Counts returns how many ranges are under-replicated and unavailable.
func (r *Report) Counts() (under, unavailable int) {
	for _, rs := range r.Ranges {
		switch {
		case rs.Unavailable != "":
			unavailable++
		case rs.UnderReplicated != "":
			under++
		}
	}
	return under, unavailable
}

// ReplicaLabel prints a replica of a descriptor: n3, n4(learner).
func ReplicaLabel(r *rpcpb.ReplicaDescriptor) string {
	switch r.Type {
	case rpcpb.ReplicaType_LEARNER:
		return fmt.Sprintf("n%d(learner)", r.NodeId)
	case rpcpb.ReplicaType_VOTER_INCOMING:
		return fmt.Sprintf("n%d(incoming)", r.NodeId)
	case rpcpb.ReplicaType_VOTER_OUTGOING:
		return fmt.Sprintf("n%d(outgoing)", r.NodeId)
	}
	return fmt.Sprintf("n%d", r.NodeId)
}

// Range health.
const (
	healthOK = iota
	healthUnder
	healthUnavailable
)

// rangeHealth says, from the leader's status (nil: no live node leads
// d), each follower's progress and whether d is under-replicated (fewer
// voters than rf, or a voter that does not take the leader's appends) or
// unavailable (no leader, or fewer than a quorum of voters taking them).
func rangeHealth(d *rpcpb.RangeDescriptor, leader *rpcpb.RangeStatus, live map[uint64]bool, rf int) (fs []Follower, health int, why string) {
	voters := 0
	for _, r := range d.Replicas {
		if r.Type != rpcpb.ReplicaType_LEARNER {
			voters++
		}
	}
	if leader == nil {
		return nil, healthUnavailable, "no leader on a live node"
	}
	up := 1 // the leader
	for _, f := range leader.Followers {
		ok := f.State == "replicate" && f.RecentActive && live[f.NodeId]
		state := f.State
		if !live[f.NodeId] {
			state = "down"
		}
		learner := f.Type == rpcpb.ReplicaType_LEARNER
		if ok && !learner {
			up++
		}
		fs = append(fs, Follower{NodeID: f.NodeId, Lag: f.Lag, State: state, Learner: learner, OK: ok})
	}
	switch {
	case up < voters/2+1:
		return fs, healthUnavailable, fmt.Sprintf("%d of %d voters up", up, voters)
	case up < voters || voters < rf:
		return fs, healthUnder, fmt.Sprintf("%d of %d voters up, replication factor %d", up, voters, rf)
	}
	return fs, healthOK, ""
}

// PrettyKey prints a logical key: /Min and /Max at the ends, system keys
// by name, the user keyspace as /User followed by the user key in Go
// string syntax (hex: in hexadecimal); /User is its start, the empty user
// key.
func PrettyKey(k []byte, hex bool) string {
	switch {
	case len(k) == 0:
		return "/Min"
	case bytes.Equal(k, keys.MaxKey):
		return "/Max"
	case keys.IsUser(k):
		u := k[len(keys.UserPrefix):]
		if len(u) == 0 {
			return "/User"
		}
		if hex {
			return "/User/" + fmt.Sprintf("%x", u)
		}
		return "/User/" + fmt.Sprintf("%q", u)
	case bytes.HasPrefix(k, keys.StatusPrefix):
		return fmt.Sprintf("/System/status/%x", k[len(keys.StatusPrefix):])
	case bytes.HasPrefix(k, keys.HeartbeatPrefix):
		return fmt.Sprintf("/System/heartbeat/%x", k[len(keys.HeartbeatPrefix):])
	}
	return fmt.Sprintf("/System/%x", k)
}

// HiddenKey stands for a user key Redact hid.
const HiddenKey = "/User/(hidden)"

// isHiddenUserKey: a user key other than the keyspace's start.
func isHiddenUserKey(k []byte) bool { return keys.IsUser(k) && len(k) > len(keys.UserPrefix) }

// JSON is a report as `canopy status -o json` prints it and the status
// page reads it: keys as PrettyKey prints them, raw keys in base64.
type JSON struct {
	ClusterID         string `json:"cluster_id"`
	ReplicationFactor uint32 `json:"replication_factor"`
	StatusEncoding    string `json:"status_encoding"`
	CommitProtocol    string `json:"commit_protocol"`
	LeasePlacement    string `json:"lease_placement,omitempty"`
	// LeasePlacementApplied: the placement the nodes carry out (spread on
	// a cluster running a hierarchy protocol, whatever the setting).
	LeasePlacementApplied string `json:"lease_placement_applied,omitempty"`
	// Hierarchy: the validator tree (hierarchy protocols only).
	Hierarchy       *HierarchyJSON `json:"hierarchy,omitempty"`
	Nodes           []NodeJSON     `json:"nodes"`
	Ranges          []RangeJSON    `json:"ranges"`
	Problems        []string       `json:"problems"`
	UnderReplicated int            `json:"under_replicated_ranges"`
	Unavailable     int            `json:"unavailable_ranges"`
	// KeysHidden: user keys were replaced by HiddenKey (Redact).
	KeysHidden bool `json:"keys_hidden,omitempty"`
	// TimeUnixMillis is when the report was gathered.
	TimeUnixMillis int64 `json:"time_unix_ms"`
}

// NodeJSON is one node of JSON.
type NodeJSON struct {
	NodeID        uint64 `json:"node_id"`
	Address       string `json:"address"`
	Live          bool   `json:"live"`
	Membership    string `json:"membership"`
	Error         string `json:"error,omitempty"`
	Version       string `json:"version,omitempty"`
	StoreBytes    uint64 `json:"store_bytes"`
	Ranges        int    `json:"ranges"`
	LeaseholderOf int    `json:"leaseholder_of"`
	// StartedUnixMillis: when the node's process started (0: unknown).
	StartedUnixMillis int64 `json:"started_unix_ms,omitempty"`
	// UptimeSeconds at the report's time.
	UptimeSeconds float64 `json:"uptime_seconds,omitempty"`
}

// RangeJSON is one range of JSON.
type RangeJSON struct {
	RangeID         uint64         `json:"range_id"`
	Start           string         `json:"start"`
	End             string         `json:"end"`
	StartKey        string         `json:"start_key_base64"`
	EndKey          string         `json:"end_key_base64"`
	Replicas        []uint64       `json:"replicas"`
	Leaseholder     uint64         `json:"leaseholder"`
	UnderReplicated string         `json:"under_replicated,omitempty"`
	Unavailable     string         `json:"unavailable,omitempty"`
	Followers       string         `json:"followers_lag,omitempty"`
	FollowerList    []FollowerJSON `json:"followers"`
	ApproxBytes     uint64         `json:"approx_bytes"`
}

// FollowerJSON is one follower of RangeJSON.
type FollowerJSON struct {
	NodeID  uint64 `json:"node_id"`
	Lag     uint64 `json:"lag"`
	State   string `json:"state"`
	Learner bool   `json:"learner,omitempty"`
	OK      bool   `json:"ok"`
}

// LeasePlacementApplied is the lease placement the nodes carry out: the
// setting, except that a cluster running a hierarchy protocol keeps spread
// ("" if the setting could not be read).
func (r *Report) LeasePlacementApplied() string {
	if r.LeasePlacement == "" {
		return ""
	}
	return string(allocator.AppliedLeasePlacement(allocator.LeasePlacement(r.LeasePlacement), commitprotocol.Of(r.Settings.GetCommitProtocol()).Hierarchy()))
}

// JSON returns the report's JSON form; errText renders an unreachable
// node's error (the CLI removes gRPC's framing from it).
func (r *Report) JSON(errText func(error) string) JSON {
	under, unavailable := r.Counts()
	out := JSON{ClusterID: r.Settings.GetClusterId(), ReplicationFactor: r.Settings.GetReplicationFactor(),
		StatusEncoding: r.Settings.GetStatusEncoding(), CommitProtocol: string(commitprotocol.Of(r.Settings.GetCommitProtocol())), LeasePlacement: r.LeasePlacement, LeasePlacementApplied: r.LeasePlacementApplied(), Problems: r.Problems(),
		UnderReplicated: under, Unavailable: unavailable, TimeUnixMillis: r.At.UnixMilli(), Hierarchy: r.Hierarchy(),
		Nodes: []NodeJSON{}, Ranges: []RangeJSON{}}
	if out.Problems == nil {
		out.Problems = []string{}
	}
	for i := range r.Nodes {
		n := &r.Nodes[i]
		nj := NodeJSON{NodeID: n.Desc.NodeId, Address: n.Desc.Address, Live: n.Status != nil, Membership: n.Membership}
		if n.Status == nil {
			nj.Error = errText(n.Err)
		} else {
			nj.Version, nj.StoreBytes, nj.Ranges = n.Status.Version, n.Status.StoreBytes, len(n.Status.Ranges)
			nj.LeaseholderOf = n.LeaseholderOf()
			if ns := n.Status.StartedUnixNanos; ns > 0 {
				started := time.Unix(0, ns)
				nj.StartedUnixMillis = started.UnixMilli()
				nj.UptimeSeconds = max(0, r.At.Sub(started).Seconds())
			}
		}
		out.Nodes = append(out.Nodes, nj)
	}
	for i := range r.Ranges {
		rs := &r.Ranges[i]
		d := rs.Info.Desc
		rj := RangeJSON{RangeID: d.RangeId, Start: PrettyKey(d.StartKey, false), End: PrettyKey(d.EndKey, false),
			StartKey: b64(d.StartKey), EndKey: b64(d.EndKey), Leaseholder: rs.Info.LeaseholderNodeID,
			UnderReplicated: rs.UnderReplicated, Unavailable: rs.Unavailable, Followers: rs.Lag(),
			FollowerList: []FollowerJSON{}, ApproxBytes: rs.Bytes, Replicas: []uint64{}}
		for _, rep := range d.Replicas {
			rj.Replicas = append(rj.Replicas, rep.NodeId)
		}
		for _, f := range rs.Followers {
			rj.FollowerList = append(rj.FollowerList, FollowerJSON{NodeID: f.NodeID, Lag: f.Lag, State: f.State, Learner: f.Learner, OK: f.OK})
		}
		out.Ranges = append(out.Ranges, rj)
	}
	return out
}

// Redact replaces every user key of j (range boundaries other than the
// user keyspace's start) by HiddenKey and drops the raw keys: for a
// reader who may see the cluster's layout but not its data.
func (j *JSON) Redact() {
	j.KeysHidden = true
	for i := range j.Ranges {
		rj := &j.Ranges[i]
		for _, k := range []struct {
			pretty, raw *string
		}{{&rj.Start, &rj.StartKey}, {&rj.End, &rj.EndKey}} {
			raw, err := base64.StdEncoding.DecodeString(*k.raw)
			if err != nil || isHiddenUserKey(raw) {
				*k.pretty = HiddenKey
			}
			*k.raw = ""
		}
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// grpcText matches the text gRPC status errors add ("rpc error: code =
// Unavailable desc = "), and transportText the connection-error wrapping
// inside it, so that ErrorText can keep the cause alone.
var (
	grpcText      = regexp.MustCompile(`rpc error: code = (\w+) desc = `)
	transportText = regexp.MustCompile(`connection error: desc = "transport: (?:Error while dialing:? )?([^"]*)"`)
)

// ErrorText renders err as one line without gRPC's framing: "unavailable:
// dial tcp 127.0.0.1:1: connect: connection refused", not "rpc error: code
// = Unavailable desc = connection error: desc = \"transport: ...".
func ErrorText(err error) string {
	s := err.Error()
	s = transportText.ReplaceAllString(s, "$1")
	s = grpcText.ReplaceAllStringFunc(s, func(m string) string {
		code := grpcText.FindStringSubmatch(m)[1]
		return strings.ToLower(splitCamel(code)) + ": "
	})
	return strings.ReplaceAll(s, "\n", " ")
}

// splitCamel turns "DeadlineExceeded" into "Deadline Exceeded".
func splitCamel(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return b.String()
}
