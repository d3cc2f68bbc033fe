package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/canopy-db/canopy/internal/kvserver"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/spf13/cobra"
)

// debugCmd groups the debug commands; each file adds its own (debug_txns.go).
var debugCmd = &cobra.Command{Use: "debug", Short: "Inspect stores and clusters"}

func init() {
	debug := debugCmd
	var store string
	st := &cobra.Command{
		Use:   "store",
		Short: "Show what a stopped node's store holds: identity, ranges, Raft state, key counts",
		Long: `Show what a stopped node's store holds: identity, ranges, Raft state, key
counts. The store is opened read-only: no file of it is created, changed or
removed (the write-ahead log is replayed in memory), so it is safe to run on a
store kept for investigation. A running node holds its store's lock: stop it
first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if fi, err := os.Stat(store); err != nil {
				return fmt.Errorf("store %s: %w", store, err)
			} else if !fi.IsDir() {
				return usageErrorf("--store %s is not a directory", store)
			}
			eng, err := storage.Open(store, storage.Options{ReadOnly: true})
			if err != nil {
				return fmt.Errorf("opening %s (is its node still running?): %w", store, err)
			}
			defer eng.Close()
			info, err := kvserver.InspectStore(eng)
			if err != nil {
				return err
			}
			if info.NodeID == 0 {
				fmt.Println("store is not part of a cluster (canopy init never reached it)")
				return nil
			}
			fmt.Printf("node n%d of cluster %s\n\n", info.NodeID, info.ClusterID)
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "RANGE\tSTART\tEND\tTERM\tCOMMIT\tAPPLIED\tTRUNCATED\tLOG\tGC THRESHOLD\tVERSIONS\tINTENTS\tPLAIN")
			for _, r := range info.Ranges {
				start, end := "(uninitialized)", ""
				if r.Desc != nil {
					start, end = prettyKey(r.Desc.StartKey), prettyKey(r.Desc.EndKey)
				}
				fmt.Fprintf(w, "r%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", r.RangeID, start, end,
					r.Raft.HardState.Term, r.Raft.HardState.Commit, r.Raft.Applied, r.Raft.Truncated, r.Raft.LogEntries,
					r.GCThreshold, r.Versions, r.Intents, r.Plain)
			}
			return w.Flush()
		},
	}
	st.Flags().StringVar(&store, "store", "canopy-data", "directory of the node's store")
	debug.AddCommand(st)
	rootCmd.AddCommand(debug)
}
