package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/spf13/cobra"
)

// DecommissionWaitMax bounds `canopy node decommission --wait`.
const DecommissionWaitMax = 24 * time.Hour

// parseNodeID parses a node ID argument: 3 or n3.
func parseNodeID(s string) (uint64, error) {
	id, err := strconv.ParseUint(strings.TrimPrefix(s, "n"), 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("node ID %q: want a positive integer such as 3 (or n3)", s)
	}
	return id, nil
}

// memberOf finds nodeID among ms.
func memberOf(ms []*rpcpb.MemberInfo, nodeID uint64) *rpcpb.MemberInfo {
	for _, m := range ms {
		if m.GetNode().GetNodeId() == nodeID {
			return m
		}
	}
	return nil
}

func init() {
	var wait time.Duration
	node := &cobra.Command{Use: "node", Short: "Cluster membership: list, add, decommission and remove nodes"}
	addConnFlags(node)

	ls := &cobra.Command{Use: "ls", Args: cobra.NoArgs, Short: "List the nodes with their membership and replica counts",
		RunE: withDB(func(ctx context.Context, db *client.DB) error {
			ms, err := db.Members(ctx)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NODE\tADDRESS\tMEMBERSHIP\tREPLICAS")
			for _, m := range ms {
				fmt.Fprintf(w, "n%d\t%s\t%s\t%d\n", m.Node.NodeId, m.Node.Address, strings.ToLower(m.Node.Membership.String()), m.Replicas)
			}
			return w.Flush()
		})}

	add := &cobra.Command{Use: "add ADDRESS", Args: cobra.ExactArgs(1),
		Short: "Make the node at ADDRESS (started with an empty store) a member; it then receives replicas",
		Long: `Make the node at ADDRESS a member of the cluster. The node must be running
with an empty store (canopy start --store NEW --listen ADDRESS). A node
started with --join naming nodes of a running cluster joins by itself; this
command does the same from the cluster's side.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkHostPort("host of ADDRESS", args[0], false, false); err != nil {
				return err
			}
			return withDB(func(ctx context.Context, db *client.DB) error {
				id, err := db.AddNode(ctx, args[0])
				if err != nil {
					return err
				}
				fmt.Printf("node n%d added at %s; replicas move to it in the background (canopy status)\n", id, args[0])
				return nil
			})(cmd, args)
		}}

	decom := &cobra.Command{Use: "decommission NODE", Args: cobra.ExactArgs(1),
		Short: "Move every replica and lease off NODE (live or dead); then `canopy node remove NODE`",
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseNodeID(args[0])
			if err != nil {
				return err
			}
			if wait < 0 || wait > DecommissionWaitMax {
				return fmt.Errorf("--wait %v is outside [0, %v]", wait, DecommissionWaitMax)
			}
			return withDB(func(ctx context.Context, db *client.DB) error {
				rec, err := db.ChangeMembership(ctx, id, rpcpb.NodeMembership_DECOMMISSIONING)
				if err != nil {
					return err
				}
				fmt.Printf("node n%d (%s) is decommissioning: its replicas and leases move to other nodes\n", id, rec.GetAddress())
				if wait == 0 {
					fmt.Printf("follow with `canopy node ls`; once it holds no replica: canopy node remove %d\n", id)
					return nil
				}
				wctx, cancel := context.WithTimeout(context.Background(), wait)
				defer cancel()
				for {
					ms, err := db.Members(wctx)
					if err == nil {
						if m := memberOf(ms, id); m != nil && m.Replicas == 0 {
							fmt.Printf("node n%d holds no replica: remove it with `canopy node remove %d`\n", id, id)
							return nil
						} else if m != nil {
							fmt.Printf("node n%d: %d replicas left\n", id, m.Replicas)
						}
					}
					select {
					case <-wctx.Done():
						return fmt.Errorf("node n%d still holds replicas after --wait %v (is there a live ACTIVE node without a replica of each of its ranges?)", id, wait)
					case <-time.After(2 * time.Second):
					}
				}
			})(cmd, args)
		}}
	decom.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for the node to hold no replica (0: do not wait)")

	recom := &cobra.Command{Use: "recommission NODE", Args: cobra.ExactArgs(1),
		Short: "Cancel a decommission: NODE takes replicas again",
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseNodeID(args[0])
			if err != nil {
				return err
			}
			return withDB(func(ctx context.Context, db *client.DB) error {
				if _, err := db.ChangeMembership(ctx, id, rpcpb.NodeMembership_ACTIVE); err != nil {
					return err
				}
				fmt.Printf("node n%d is active again\n", id)
				return nil
			})(cmd, args)
		}}

	remove := &cobra.Command{Use: "remove NODE", Args: cobra.ExactArgs(1),
		Short: "Remove NODE from the cluster for good (refused while it holds replicas)",
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseNodeID(args[0])
			if err != nil {
				return err
			}
			return withDB(func(ctx context.Context, db *client.DB) error {
				rec, err := db.ChangeMembership(ctx, id, rpcpb.NodeMembership_REMOVED)
				if err != nil {
					return err
				}
				fmt.Printf("node n%d (%s) removed; its ID is never reused, and its address may be used by a new node\n", id, rec.GetAddress())
				return nil
			})(cmd, args)
		}}
	node.AddCommand(ls, add, decom, recom, remove)
	rootCmd.AddCommand(node)
}
