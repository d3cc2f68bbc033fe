package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/tso"
	"github.com/spf13/cobra"
)

// DebugTxnsLimitMax bounds --limit of debug txns (rows held and printed).
const DebugTxnsLimitMax = 1_000_000

func init() {
	var from, to string
	var limit int
	txns := &cobra.Command{
		Use:   "txns",
		Short: "List the transactions of a start-timestamp interval from the status table, with counts",
		Long: `List the transactions whose start timestamp lies in [--from, --to): status
(committed, aborted, pending), commit timestamp, and a note for STAGING and
FENCE records and heartbeat records; then the count of pending, committed
and aborted transactions. The status table is scanned by interval (for the
tickets encoding, one span per row of the partitions met, or the whole table
filtered for long intervals). A running transaction that has written no
record yet is not listed.

Timestamps: an oracle timestamp (a number), "now" (a fresh oracle
timestamp), or a duration before now ("-10m", "-1h30m").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkRange("limit", limit, 0, DebugTxnsLimitMax); err != nil {
				return err
			}
			return withDB(func(ctx context.Context, db *client.DB) error {
				f, err := parseTs(ctx, db, "from", from)
				if err != nil {
					return err
				}
				t, err := parseTs(ctx, db, "to", to)
				if err != nil {
					return err
				}
				if f >= t {
					return fmt.Errorf("--from %s (%d) is not before --to %s (%d)", from, f, to, t)
				}
				return debugTxns(ctx, db, f, t, limit)
			})(cmd, args)
		},
	}
	addConnFlags(txns) // conn.go
	txns.Flags().StringVar(&from, "from", "-10m", "first start timestamp of the interval (a timestamp, now, or -DURATION)")
	txns.Flags().StringVar(&to, "to", "now", "end of the interval, exclusive (a timestamp, now, or -DURATION)")
	txns.Flags().IntVar(&limit, "limit", 1000, fmt.Sprintf("most transactions to print, the earliest by start timestamp (0: counts only; at most %d)", DebugTxnsLimitMax))
	debugCmd.AddCommand(txns)
}

// debugTxns prints the transactions of [from, to) and their counts.
func debugTxns(ctx context.Context, db *client.DB, from, to uint64, limit int) error {
	var rows []client.TxnRecord
	var pending, committed, aborted int
	byStart := func(a, b client.TxnRecord) int {
		switch {
		case a.StartTs < b.StartTs:
			return -1
		case a.StartTs > b.StartTs:
			return 1
		}
		return 0
	}
	err := db.ScanTxns(ctx, from, to, func(r client.TxnRecord) error {
		switch {
		case r.Pending():
			pending++
		case r.Aborted:
			aborted++
		default:
			committed++
		}
		if limit == 0 {
			return nil
		}
		rows = append(rows, r)
		// Keep the earliest limit rows, in memory bounded by 2*limit.
		if len(rows) >= 2*limit {
			slices.SortFunc(rows, byStart)
			rows = rows[:limit]
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(rows, byStart)
	total := pending + committed + aborted
	if len(rows) > limit {
		rows = rows[:limit]
	}
	if len(rows) > 0 {
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "START_TS\tSTARTED (UTC)\tSTATUS\tCOMMIT_TS\tNOTE")
		for _, r := range rows {
			status, commit := "committed", strconv.FormatUint(r.CommitTs, 10)
			switch {
			case r.Pending():
				status, commit = "pending", "-"
			case r.Aborted:
				status, commit = "aborted", "-"
			}
			var notes []string
			if r.Staged {
				notes = append(notes, fmt.Sprintf("STAGING at %d", r.StagedTs))
			}
			if r.Fenced {
				notes = append(notes, "fenced")
			}
			if r.Heartbeat {
				notes = append(notes, "heartbeat record")
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", r.StartTs, tsTime(r.StartTs), status, commit, strings.Join(notes, ", "))
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if len(rows) < total {
			fmt.Printf("(the earliest %d of %d by start timestamp; --limit shows more)\n", len(rows), total)
		}
		fmt.Println()
	}
	fmt.Printf("start timestamps [%d, %d): %d transactions: pending %d, committed %d, aborted %d\n",
		from, to, total, pending, committed, aborted)
	return nil
}

// tsTime is the wall-clock time an oracle timestamp encodes.
func tsTime(ts uint64) string {
	return time.UnixMilli(int64(ts >> tso.DefaultLogicalBits)).UTC().Format("2006-01-02 15:04:05.000")
}

// parseTs reads a timestamp flag: a number, "now" (a fresh oracle
// timestamp), or "-DURATION" (that long before a fresh oracle timestamp,
// counted in the oracle's wall-clock milliseconds).
func parseTs(ctx context.Context, db *client.DB, flag, s string) (uint64, error) {
	switch {
	case s == "now":
		return db.Timestamp(ctx)
	case strings.HasPrefix(s, "-"):
		d, err := time.ParseDuration(s[1:])
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("--%s %q: want a timestamp, now, or -DURATION such as -10m", flag, s)
		}
		now, err := db.Timestamp(ctx)
		if err != nil {
			return 0, err
		}
		back := uint64(d.Milliseconds()) << tso.DefaultLogicalBits
		if back >= now {
			return 0, fmt.Errorf("--%s %q reaches before the oracle's first timestamp", flag, s)
		}
		return now - back, nil
	}
	ts, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: want a timestamp, now, or -DURATION such as -10m", flag, s)
	}
	return ts, nil
}
