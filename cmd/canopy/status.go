package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/spf13/cobra"
)

// statusOutput is status's --output.
var statusOutput string

func init() {
	status := &cobra.Command{Use: "status", Short: "Show nodes, ranges and leaseholders; exit status 7 if a node is unreachable or a range under-replicated",
		Long: `Show the cluster's nodes (address, liveness, version, store size, ranges and
leases held) and its ranges (span, replicas, leaseholder), system ranges first,
then the user keyspace, whose first range starts at /User.

A range is under-replicated when it has fewer replicas than the cluster's
replication factor or a replica on a node that does not answer. The exit status
is 0 when every node answers and no range is under-replicated, 7 otherwise, so
that scripts can wait for a healthy cluster:

  until canopy status >/dev/null; do sleep 1; done`,
		Args: cobra.NoArgs,
		RunE: withDB(func(ctx context.Context, db *client.DB) error {
			if err := checkOutput(statusOutput); err != nil {
				return err
			}
			st, err := clusterStatus(ctx, db)
			if err != nil {
				return err
			}
			if statusOutput == outputJSON {
				if err := printJSON(st.json()); err != nil {
					return err
				}
			} else if err := st.print(os.Stdout, statusOutput); err != nil {
				return err
			}
			if p := st.problems(); len(p) > 0 {
				fmt.Fprintln(os.Stderr, "degraded:", strings.Join(p, "; "))
				return errDegraded
			}
			return nil
		})}
	addConnFlags(status)
	addOutputFlag(status, &statusOutput)
	rootCmd.AddCommand(status)
}

// nodeState is one node as status saw it.
type nodeState struct {
	desc *rpcpb.NodeDescriptor
	st   *rpcpb.NodeStatusResponse // nil: unreachable
	err  error
	// membership: active, decommissioning ("-" if unknown).
	membership string
}

// rangeState is one range as status saw it.
type rangeState struct {
	info client.RangeInfo
	// underReplicated says why the range is under-replicated ("" if not);
	// unavailable why it cannot commit (no leader on a live node, fewer
	// than a quorum of voters taking the leader's appends).
	underReplicated, unavailable string
	// lag: each follower's lag in log entries, as the leader sees it.
	lag string
}

type statusReport struct {
	settings *rpcpb.ClusterSettings
	nodes    []nodeState
	ranges   []rangeState
}

func clusterStatus(ctx context.Context, db *client.DB) (*statusReport, error) {
	info, err := db.ClusterInfo(ctx)
	if err != nil {
		return nil, err
	}
	r := &statusReport{settings: info.Settings}
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
		r.nodes = append(r.nodes, nodeState{desc: nd, st: st, err: err, membership: m})
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
		rs := rangeState{info: ri}
		var down []string
		for _, rep := range ri.Desc.Replicas {
			if !live[rep.NodeId] {
				down = append(down, fmt.Sprintf("n%d", rep.NodeId))
			}
		}
		var health int
		var why string
		rs.lag, health, why = rangeHealth(ri.Desc, led[ri.Desc.RangeId], live, rf)
		switch {
		case health == healthUnavailable:
			rs.unavailable = why
		case len(ri.Desc.Replicas) < rf:
			rs.underReplicated = fmt.Sprintf("%d of %d replicas", len(ri.Desc.Replicas), rf)
		case len(down) > 0:
			rs.underReplicated = "replica on unreachable " + strings.Join(down, ",")
		case health == healthUnder:
			rs.underReplicated = why
		}
		r.ranges = append(r.ranges, rs)
	}
	return r, nil
}

// problems lists what makes the cluster degraded.
func (r *statusReport) problems() []string {
	var out []string
	for _, n := range r.nodes {
		if n.st == nil {
			out = append(out, fmt.Sprintf("node n%d (%s) unreachable", n.desc.NodeId, n.desc.Address))
		}
	}
	under, unavailable := r.counts()
	if under > 0 {
		out = append(out, fmt.Sprintf("%d of %d ranges under-replicated", under, len(r.ranges)))
	}
	if unavailable > 0 {
		out = append(out, fmt.Sprintf("%d of %d ranges unavailable", unavailable, len(r.ranges)))
	}
	return out
}

func (r *statusReport) print(w io.Writer, format string) error {
	s := r.settings
	fmt.Fprintf(w, "cluster %s: replication factor %d, status encoding %s\n\n", s.ClusterId, s.ReplicationFactor, s.StatusEncoding)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tSTATE\tMEMBERSHIP\tVERSION\tSTORE SIZE\tRANGES\tLEASEHOLDER OF")
	for _, n := range r.nodes {
		if n.st == nil {
			fmt.Fprintf(tw, "n%d\t%s\tunreachable\t%s\t-\t-\t-\t-\n", n.desc.NodeId, n.desc.Address, n.membership)
			continue
		}
		leads := 0
		for _, rs := range n.st.Ranges {
			if rs.LeaderNodeId == n.st.NodeId {
				leads++
			}
		}
		fmt.Fprintf(tw, "n%d\t%s\tlive\t%s\t%s\t%s\t%d\t%d\n", n.desc.NodeId, n.desc.Address, n.membership, n.st.Version,
			humanBytes(n.st.StoreBytes), len(n.st.Ranges), leads)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANGE\tSTART\tEND\tREPLICAS\tLEASEHOLDER\tFOLLOWERS (LAG)\tSTATE")
	for _, rs := range r.ranges {
		d := rs.info.Desc
		var reps []string
		for _, rep := range d.Replicas {
			reps = append(reps, replicaLabel(rep))
		}
		lh := "unknown"
		if rs.info.LeaseholderNodeID != 0 {
			lh = fmt.Sprintf("n%d", rs.info.LeaseholderNodeID)
		}
		state := "ok"
		switch {
		case rs.unavailable != "":
			state = "unavailable: " + rs.unavailable
		case rs.underReplicated != "":
			state = "under-replicated: " + rs.underReplicated
		}
		fmt.Fprintf(tw, "r%d\t%s\t%s\t%s\t%s\t%s\t%s\n", d.RangeId, prettyKeyAs(format, d.StartKey), prettyKeyAs(format, d.EndKey),
			strings.Join(reps, ","), lh, rs.lag, state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	under, unavailable := r.counts()
	fmt.Fprintf(w, "\nunder-replicated ranges: %d\nunavailable ranges: %d\n", under, unavailable)
	return nil
}

// counts returns how many ranges are under-replicated and unavailable.
func (r *statusReport) counts() (under, unavailable int) {
	for _, rs := range r.ranges {
		switch {
		case rs.unavailable != "":
			unavailable++
		case rs.underReplicated != "":
			under++
		}
	}
	return under, unavailable
}

// replicaLabel prints a replica of a descriptor: n3, n4(learner).
func replicaLabel(r *rpcpb.ReplicaDescriptor) string {
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

// Range health, as status shows it.
const (
	healthOK = iota
	healthUnder
	healthUnavailable
)

// rangeHealth says, from the leader's status (nil: no live node leads
// d), each follower's lag and whether d is under-replicated (fewer voters
// than rf, or a voter that does not take the leader's appends) or
// unavailable (no leader, or fewer than a quorum of voters taking them).
func rangeHealth(d *rpcpb.RangeDescriptor, leader *rpcpb.RangeStatus, live map[uint64]bool, rf int) (lag string, health int, why string) {
	voters := 0
	for _, r := range d.Replicas {
		if r.Type != rpcpb.ReplicaType_LEARNER {
			voters++
		}
	}
	if leader == nil {
		return "-", healthUnavailable, "no leader on a live node"
	}
	var parts []string
	up := 1 // the leader
	for _, f := range leader.Followers {
		p := fmt.Sprintf("n%d:%d", f.NodeId, f.Lag)
		ok := f.State == "replicate" && f.RecentActive && live[f.NodeId]
		if !ok {
			state := f.State
			if !live[f.NodeId] {
				state = "down"
			}
			p += "(" + state + ")"
		}
		if f.Type == rpcpb.ReplicaType_LEARNER {
			p += "(learner)"
		} else if ok {
			up++
		}
		parts = append(parts, p)
	}
	lag = strings.Join(parts, " ")
	if lag == "" {
		lag = "-"
	}
	switch {
	case up < voters/2+1:
		return lag, healthUnavailable, fmt.Sprintf("%d of %d voters up", up, voters)
	case up < voters || voters < rf:
		return lag, healthUnder, fmt.Sprintf("%d of %d voters up, replication factor %d", up, voters, rf)
	}
	return lag, healthOK, ""
}

// json is the report as --output json prints it (keys as prettyKey, raw
// bytes in base64).
func (r *statusReport) json() any {
	type nodeJSON struct {
		NodeID        uint64 `json:"node_id"`
		Address       string `json:"address"`
		Live          bool   `json:"live"`
		Membership    string `json:"membership"`
		Error         string `json:"error,omitempty"`
		Version       string `json:"version,omitempty"`
		StoreBytes    uint64 `json:"store_bytes"`
		Ranges        int    `json:"ranges"`
		LeaseholderOf int    `json:"leaseholder_of"`
	}
	type rangeJSON struct {
		RangeID         uint64   `json:"range_id"`
		Start           string   `json:"start"`
		End             string   `json:"end"`
		StartKey        string   `json:"start_key_base64"`
		EndKey          string   `json:"end_key_base64"`
		Replicas        []uint64 `json:"replicas"`
		Leaseholder     uint64   `json:"leaseholder"`
		UnderReplicated string   `json:"under_replicated,omitempty"`
		Unavailable     string   `json:"unavailable,omitempty"`
		Followers       string   `json:"followers_lag,omitempty"`
	}
	out := struct {
		ClusterID         string      `json:"cluster_id"`
		ReplicationFactor uint32      `json:"replication_factor"`
		StatusEncoding    string      `json:"status_encoding"`
		Nodes             []nodeJSON  `json:"nodes"`
		Ranges            []rangeJSON `json:"ranges"`
		Problems          []string    `json:"problems"`
	}{ClusterID: r.settings.ClusterId, ReplicationFactor: r.settings.ReplicationFactor,
		StatusEncoding: r.settings.StatusEncoding, Problems: r.problems()}
	if out.Problems == nil {
		out.Problems = []string{}
	}
	for _, n := range r.nodes {
		nj := nodeJSON{NodeID: n.desc.NodeId, Address: n.desc.Address, Live: n.st != nil, Membership: n.membership}
		if n.st == nil {
			nj.Error = errorLine(n.err)
		} else {
			nj.Version, nj.StoreBytes, nj.Ranges = n.st.Version, n.st.StoreBytes, len(n.st.Ranges)
			for _, rs := range n.st.Ranges {
				if rs.LeaderNodeId == n.st.NodeId {
					nj.LeaseholderOf++
				}
			}
		}
		out.Nodes = append(out.Nodes, nj)
	}
	for _, rs := range r.ranges {
		d := rs.info.Desc
		rj := rangeJSON{RangeID: d.RangeId, Start: prettyKey(d.StartKey), End: prettyKey(d.EndKey),
			StartKey: b64(d.StartKey), EndKey: b64(d.EndKey), Leaseholder: rs.info.LeaseholderNodeID,
			UnderReplicated: rs.underReplicated, Unavailable: rs.unavailable, Followers: rs.lag}
		for _, rep := range d.Replicas {
			rj.Replicas = append(rj.Replicas, rep.NodeId)
		}
		out.Ranges = append(out.Ranges, rj)
	}
	return out
}

// prettyKey prints a logical key: /Min and /Max at the ends, system keys
// by name, the user keyspace as /User followed by the user key in Go
// string syntax (/User is its start, the empty user key).
func prettyKey(k []byte) string { return prettyKeyAs(outputTable, k) }

// prettyKeyAs is prettyKey with the user key in format (hex: hexadecimal).
func prettyKeyAs(format string, k []byte) string {
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
		if format == outputHex {
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

// humanBytes renders n bytes with a binary unit: 512 B, 1.5 KiB, 3.2 GiB.
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
