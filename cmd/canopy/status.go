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
}

// rangeState is one range as status saw it.
type rangeState struct {
	info client.RangeInfo
	// underReplicated says why the range is under-replicated ("" if not).
	underReplicated string
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
	live := map[uint64]bool{}
	for _, nd := range info.Nodes {
		st, err := db.NodeStatus(ctx, nd.Address)
		r.nodes = append(r.nodes, nodeState{desc: nd, st: st, err: err})
		live[nd.NodeId] = err == nil
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
		switch {
		case len(ri.Desc.Replicas) < rf:
			rs.underReplicated = fmt.Sprintf("%d of %d replicas", len(ri.Desc.Replicas), rf)
		case len(down) > 0:
			rs.underReplicated = "replica on unreachable " + strings.Join(down, ",")
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
	under := 0
	for _, rs := range r.ranges {
		if rs.underReplicated != "" {
			under++
		}
	}
	if under > 0 {
		out = append(out, fmt.Sprintf("%d of %d ranges under-replicated", under, len(r.ranges)))
	}
	return out
}

func (r *statusReport) print(w io.Writer, format string) error {
	s := r.settings
	fmt.Fprintf(w, "cluster %s: replication factor %d, status encoding %s\n\n", s.ClusterId, s.ReplicationFactor, s.StatusEncoding)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tSTATE\tVERSION\tSTORE SIZE\tRANGES\tLEASEHOLDER OF")
	for _, n := range r.nodes {
		if n.st == nil {
			fmt.Fprintf(tw, "n%d\t%s\tunreachable\t-\t-\t-\t-\n", n.desc.NodeId, n.desc.Address)
			continue
		}
		leads := 0
		for _, rs := range n.st.Ranges {
			if rs.LeaderNodeId == n.st.NodeId {
				leads++
			}
		}
		fmt.Fprintf(tw, "n%d\t%s\tlive\t%s\t%s\t%d\t%d\n", n.desc.NodeId, n.desc.Address, n.st.Version,
			humanBytes(n.st.StoreBytes), len(n.st.Ranges), leads)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANGE\tSTART\tEND\tREPLICAS\tLEASEHOLDER\tSTATE")
	for _, rs := range r.ranges {
		d := rs.info.Desc
		var reps []string
		for _, rep := range d.Replicas {
			reps = append(reps, fmt.Sprintf("n%d", rep.NodeId))
		}
		lh := "unknown"
		if rs.info.LeaseholderNodeID != 0 {
			lh = fmt.Sprintf("n%d", rs.info.LeaseholderNodeID)
		}
		state := "ok"
		if rs.underReplicated != "" {
			state = "under-replicated: " + rs.underReplicated
		}
		fmt.Fprintf(tw, "r%d\t%s\t%s\t%s\t%s\t%s\n", d.RangeId, prettyKeyAs(format, d.StartKey), prettyKeyAs(format, d.EndKey),
			strings.Join(reps, ","), lh, state)
	}
	return tw.Flush()
}

// json is the report as --output json prints it (keys as prettyKey, raw
// bytes in base64).
func (r *statusReport) json() any {
	type nodeJSON struct {
		NodeID        uint64 `json:"node_id"`
		Address       string `json:"address"`
		Live          bool   `json:"live"`
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
		nj := nodeJSON{NodeID: n.desc.NodeId, Address: n.desc.Address, Live: n.st != nil}
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
			UnderReplicated: rs.underReplicated}
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
