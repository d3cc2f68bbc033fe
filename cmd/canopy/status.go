package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/clusterstatus"
	"github.com/canopy-db/canopy/internal/commitprotocol"
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

// statusReport is the cluster's status (internal/clusterstatus, shared
// with the nodes' status page).
type statusReport struct{ *clusterstatus.Report }

func clusterStatus(ctx context.Context, db *client.DB) (*statusReport, error) {
	r, err := clusterstatus.Gather(ctx, db)
	if err != nil {
		return nil, err
	}
	return &statusReport{r}, nil
}

// problems lists what makes the cluster degraded.
func (r *statusReport) problems() []string { return r.Problems() }

// json is the report as --output json prints it (keys as prettyKey, raw
// bytes in base64).
func (r *statusReport) json() any { return r.JSON(errorLine) }

func (r *statusReport) print(w io.Writer, format string) error {
	s := r.Settings
	lp := r.LeasePlacement
	if lp == "" {
		lp = "unknown"
	}
	if applied := r.LeasePlacementApplied(); applied != "" && applied != lp {
		lp += fmt.Sprintf(" (not applied: %s keeps %s)", commitprotocol.Of(s.CommitProtocol), applied)
	}
	fmt.Fprintf(w, "cluster %s: replication factor %d, status encoding %s, commit protocol %s, lease placement %s\n", s.ClusterId, s.ReplicationFactor, s.StatusEncoding, commitprotocol.Of(s.CommitProtocol), lp)
	if line := r.HierarchyLine(); line != "" {
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tSTATE\tMEMBERSHIP\tVERSION\tSTORE SIZE\tRANGES\tLEASEHOLDER OF")
	for i := range r.Nodes {
		n := &r.Nodes[i]
		if n.Status == nil {
			fmt.Fprintf(tw, "n%d\t%s\tunreachable\t%s\t-\t-\t-\t-\n", n.Desc.NodeId, n.Desc.Address, n.Membership)
			continue
		}
		fmt.Fprintf(tw, "n%d\t%s\tlive\t%s\t%s\t%s\t%d\t%d\n", n.Desc.NodeId, n.Desc.Address, n.Membership, n.Status.Version,
			humanBytes(n.Status.StoreBytes), len(n.Status.Ranges), n.LeaseholderOf())
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANGE\tSTART\tEND\tREPLICAS\tLEASEHOLDER\tFOLLOWERS (LAG)\tSTATE")
	for i := range r.Ranges {
		rs := &r.Ranges[i]
		d := rs.Info.Desc
		var reps []string
		for _, rep := range d.Replicas {
			reps = append(reps, clusterstatus.ReplicaLabel(rep))
		}
		lh := "unknown"
		if rs.Info.LeaseholderNodeID != 0 {
			lh = fmt.Sprintf("n%d", rs.Info.LeaseholderNodeID)
		}
		state := "ok"
		switch {
		case rs.Unavailable != "":
			state = "unavailable: " + rs.Unavailable
		case rs.UnderReplicated != "":
			state = "under-replicated: " + rs.UnderReplicated
		}
		fmt.Fprintf(tw, "r%d\t%s\t%s\t%s\t%s\t%s\t%s\n", d.RangeId, prettyKeyAs(format, d.StartKey), prettyKeyAs(format, d.EndKey),
			strings.Join(reps, ","), lh, rs.Lag(), state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	under, unavailable := r.Counts()
	fmt.Fprintf(w, "\nunder-replicated ranges: %d\nunavailable ranges: %d\n", under, unavailable)
	return nil
}

// prettyKey prints a logical key (clusterstatus.PrettyKey): /Min and
// /Max at the ends, system keys by name, the user keyspace as /User
// followed by the user key in Go string syntax.
func prettyKey(k []byte) string { return clusterstatus.PrettyKey(k, false) }

// prettyKeyAs is prettyKey with the user key in format (hex: hexadecimal).
func prettyKeyAs(format string, k []byte) string {
	return clusterstatus.PrettyKey(k, format == outputHex)
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
