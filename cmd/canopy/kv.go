package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/spf13/cobra"
)

var (
	hosts string
	// dialTimeout bounds the first contact of a CLI command with the
	// cluster (client.Options.DialTimeout).
	dialTimeout time.Duration
)

// DialTimeoutMax bounds --dial-timeout.
const DialTimeoutMax = 10 * time.Minute

func openDB(ctx context.Context) (*client.DB, error) {
	if dialTimeout <= 0 || dialTimeout > DialTimeoutMax {
		return nil, fmt.Errorf("--dial-timeout %v: want a duration in (0, %v]", dialTimeout, DialTimeoutMax)
	}
	return client.Open(ctx, splitHosts(hosts), client.WithOptions(client.Options{DialTimeout: dialTimeout}))
}

func withDB(f func(ctx context.Context, db *client.DB) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
		defer cancel()
		db, err := openDB(ctx)
		if err != nil {
			return err
		}
		defer db.Close()
		return f(ctx, db)
	}
}

func init() {
	rootCmd.PersistentFlags().DurationVar(&dialTimeout, "dial-timeout", 2*time.Second,
		"how long a command waits for any of the --host nodes to answer before it fails")
	kv := &cobra.Command{Use: "kv", Short: "Single-key reads and writes outside transactions"}
	kv.PersistentFlags().StringVar(&hosts, "host", "127.0.0.1:26257", "comma-separated node addresses")
	var limit int
	get := &cobra.Command{Use: "get KEY", Args: cobra.ExactArgs(1), Short: "Print the value of KEY",
		RunE: func(cmd *cobra.Command, args []string) error {
			return withDB(func(ctx context.Context, db *client.DB) error {
				v, ok, err := db.Get(ctx, []byte(args[0]))
				if err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("key %q not found", args[0])
				}
				fmt.Println(string(v))
				return nil
			})(cmd, args)
		}}
	put := &cobra.Command{Use: "put KEY VALUE", Args: cobra.ExactArgs(2), Short: "Write VALUE at KEY",
		RunE: func(cmd *cobra.Command, args []string) error {
			return withDB(func(ctx context.Context, db *client.DB) error {
				return db.Put(ctx, []byte(args[0]), []byte(args[1]))
			})(cmd, args)
		}}
	del := &cobra.Command{Use: "del KEY", Args: cobra.ExactArgs(1), Short: "Delete KEY",
		RunE: func(cmd *cobra.Command, args []string) error {
			return withDB(func(ctx context.Context, db *client.DB) error {
				return db.Delete(ctx, []byte(args[0]))
			})(cmd, args)
		}}
	scan := &cobra.Command{Use: "scan [START [END]]", Args: cobra.MaximumNArgs(2), Short: "Print keys in [START, END)",
		RunE: func(cmd *cobra.Command, args []string) error {
			return withDB(func(ctx context.Context, db *client.DB) error {
				var start, end []byte
				if len(args) > 0 {
					start = []byte(args[0])
				}
				if len(args) > 1 {
					end = []byte(args[1])
				}
				kvs, err := db.Scan(ctx, start, end, limit)
				if err != nil {
					return err
				}
				for _, kv := range kvs {
					fmt.Printf("%s\t%s\n", kv.Key, kv.Value)
				}
				return nil
			})(cmd, args)
		}}
	scan.Flags().IntVar(&limit, "limit", 1000, "most keys to print")
	kv.AddCommand(get, put, del, scan)
	rootCmd.AddCommand(kv)

	status := &cobra.Command{Use: "status", Short: "Show nodes, ranges and leaseholders",
		RunE: withDB(func(ctx context.Context, db *client.DB) error {
			info, err := db.ClusterInfo(ctx)
			if err != nil {
				return err
			}
			s := info.Settings
			fmt.Printf("cluster %s: replication factor %d, status encoding %s\n\n", s.ClusterId, s.ReplicationFactor, s.StatusEncoding)
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NODE\tADDRESS\tSTATE\tRANGES\tLEASEHOLDER OF")
			for _, nd := range info.Nodes {
				st, err := db.NodeStatus(ctx, nd.Address)
				if err != nil {
					fmt.Fprintf(w, "n%d\t%s\tunreachable\t-\t-\n", nd.NodeId, nd.Address)
					continue
				}
				leads := 0
				for _, r := range st.Ranges {
					if r.LeaderNodeId == st.NodeId {
						leads++
					}
				}
				fmt.Fprintf(w, "n%d\t%s\tlive\t%d\t%d\n", nd.NodeId, nd.Address, len(st.Ranges), leads)
			}
			w.Flush()
			fmt.Println()
			ranges, err := db.Ranges(ctx)
			if err != nil {
				return err
			}
			w = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "RANGE\tSTART\tEND\tREPLICAS\tLEASEHOLDER")
			for _, r := range ranges {
				var reps []string
				for _, rep := range r.Desc.Replicas {
					reps = append(reps, fmt.Sprintf("n%d", rep.NodeId))
				}
				lh := "unknown"
				if r.LeaseholderNodeID != 0 {
					lh = fmt.Sprintf("n%d", r.LeaseholderNodeID)
				}
				fmt.Fprintf(w, "r%d\t%s\t%s\t%s\t%s\n", r.Desc.RangeId, prettyKey(r.Desc.StartKey), prettyKey(r.Desc.EndKey), strings.Join(reps, ","), lh)
			}
			return w.Flush()
		})}
	status.Flags().StringVar(&hosts, "host", "127.0.0.1:26257", "comma-separated node addresses")
	rootCmd.AddCommand(status)

	split := &cobra.Command{Use: "split KEY", Args: cobra.ExactArgs(1), Short: "Split the range containing KEY at KEY",
		RunE: func(cmd *cobra.Command, args []string) error {
			return withDB(func(ctx context.Context, db *client.DB) error {
				if err := db.Split(ctx, []byte(args[0])); err != nil {
					return err
				}
				fmt.Printf("split at %q\n", args[0])
				return nil
			})(cmd, args)
		}}
	split.Flags().StringVar(&hosts, "host", "127.0.0.1:26257", "comma-separated node addresses")
	adminCmd.AddCommand(split)
}

// prettyKey prints a logical key: user keys quoted, system keys by name.
func prettyKey(k []byte) string {
	switch {
	case len(k) == 0:
		return "/Min"
	case bytes.Equal(k, keys.MaxKey):
		return "/Max"
	case keys.IsUser(k):
		return fmt.Sprintf("%q", k[1:])
	case bytes.HasPrefix(k, keys.StatusPrefix):
		return fmt.Sprintf("/System/status/%x", k[len(keys.StatusPrefix):])
	case bytes.HasPrefix(k, keys.HeartbeatPrefix):
		return fmt.Sprintf("/System/heartbeat/%x", k[len(keys.HeartbeatPrefix):])
	}
	return fmt.Sprintf("/System/%x", k)
}
