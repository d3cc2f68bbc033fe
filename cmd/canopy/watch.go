package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/spf13/cobra"
)

// watchOutput prints a watch's events, one line each:
//
//	COMMIT_TS<TAB>KEY<TAB>VALUE      a key's new value
//	COMMIT_TS<TAB>KEY<TAB>DELETE     a deletion
//	RESOLVED_TS<TAB>resolved         with --resolved: nothing at or below
//	                                 RESOLVED_TS will be printed later
//
// Keys and values are written as kv's table output writes them (Go
// string literals when not printable), and a value that reads DELETE is
// quoted.
func watchOutput(w io.Writer, ev client.WatchEvent, resolved bool) {
	switch {
	case ev.Resolved != 0:
		if resolved {
			fmt.Fprintf(w, "%d\tresolved\n", ev.Resolved)
		}
	case ev.Deleted:
		fmt.Fprintf(w, "%d\t%s\tDELETE\n", ev.Ts, formatBytes(outputTable, ev.Key))
	default:
		v := formatBytes(outputTable, ev.Value)
		if v == "DELETE" {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\n", ev.Ts, formatBytes(outputTable, ev.Key), v)
	}
}

func init() {
	var (
		from     uint64
		resolved bool
		duration time.Duration
	)
	cmd := &cobra.Command{
		Use:   "watch PREFIX",
		Args:  cobra.ExactArgs(1),
		Short: "Print the committed changes of the keys starting with PREFIX as they happen",
		Long: `Print every committed change of the keys starting with PREFIX (an empty
PREFIX: all keys), one line each: commit timestamp, key, and the new value
or DELETE. With --from TS it first prints the changes after TS from history
(TS below the version-GC threshold fails: "compacted"), then follows live
changes; by default it starts now. With --resolved it also prints resolved
timestamps ("TS<TAB>resolved"): every change at or below TS has been
printed. Changes of one key come in commit order; a watch survives
leaseholder changes, splits and node restarts without losing or repeating
a change. Runs until interrupted, or for --duration.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if duration < 0 {
				return usageErrorf("--duration %v is negative", duration)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			octx, ocancel := context.WithTimeout(ctx, conn.timeout)
			db, err := openDB(octx)
			ocancel()
			if err != nil {
				return err
			}
			defer db.Close()
			w, err := db.Watch(ctx, client.PrefixSpan([]byte(args[0])), from)
			if err != nil {
				return err
			}
			defer w.Close()
			out := cmd.OutOrStdout()
			for ev := range w.Events() {
				watchOutput(out, ev, resolved)
			}
			if err := w.Err(); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			return nil
		},
	}
	addConnFlags(cmd) // --timeout bounds connecting only: a watch runs for --duration
	cmd.Flags().Uint64Var(&from, "from", 0, "print the changes after this timestamp first (0: start now)")
	cmd.Flags().BoolVar(&resolved, "resolved", false, "also print resolved timestamps")
	cmd.Flags().DurationVar(&duration, "duration", 0, "stop after this long (0: run until interrupted)")
	rootCmd.AddCommand(cmd)
}
