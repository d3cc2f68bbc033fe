package main

import (
	"context"
	"fmt"

	"github.com/canopy-db/canopy/client"
	"github.com/spf13/cobra"
)

// canopy admin setting: show or change the cluster's transaction switches
// (client/settings.go) at run time. Clients pick a change up within their
// SettingsRefresh (5 s by default); transactions already begun keep theirs.
func init() {
	var pipelining, parallel, onePC, statusEncoding, leases string
	cmd := &cobra.Command{
		Use:   "setting",
		Short: "Show or set the cluster's transaction switches (pipelining, parallel commits, 1PC), status encoding and lease placement",
		Long: "Without flags, prints the cluster's transaction switches and its status encoding schedule. Each\n" +
			"switch flag sets one switch to on, off or default (on). Clients read the setting at start and every\n" +
			"few seconds; a transaction's own options and its client's options override it.\n\n" +
			"--status-encoding v1|tickets|tickets-mix moves the transaction status table to that encoding while the cluster\n" +
			"runs: transactions that start after the cutover timestamp printed use it; those started before keep\n" +
			"theirs, and lookups of their timestamps use the old encoding. The cutover is within the schedule's\n" +
			"extension (5 minutes by default) of now.\n\n" +
			"--lease-placement spread|oracle: spread (the default) spreads ranges' leases over the nodes; oracle puts\n" +
			"every range's lease on the node that holds range 1's (the timestamp oracle's host), so that writes take\n" +
			"their timestamps without a round trip between nodes, and that node evaluates every request. Nodes read\n" +
			"it within a few seconds and move leases over their next balance rounds.",
		Args: cobra.NoArgs,
		// Bad values are refused before connecting, whether a cluster
		// answers or not.
		PreRunE: func(*cobra.Command, []string) error {
			for _, f := range [][2]string{{"--pipelining", pipelining}, {"--parallel-commits", parallel}, {"--one-pc", onePC}} {
				if f[1] != "" {
					if _, err := parseToggle(f[0], f[1]); err != nil {
						return err
					}
				}
			}
			if leases != "" && leases != client.LeasesSpread && leases != client.LeasesWithOracle {
				return usageErrorf("--lease-placement=%q: want spread or oracle", leases)
			}
			if statusEncoding != "" && statusEncoding != "v1" && statusEncoding != "tickets" && statusEncoding != "tickets-mix" {
				return usageErrorf("--status-encoding=%q: want v1, tickets or tickets-mix", statusEncoding)
			}
			return nil
		},
		RunE: withDB(func(ctx context.Context, db *client.DB) error {
			s, err := db.TxnSwitches(ctx)
			if err != nil {
				return err
			}
			changed := false
			for _, f := range []struct {
				val string
				t   *client.Toggle
				nm  string
			}{{pipelining, &s.Pipelining, "--pipelining"}, {parallel, &s.ParallelCommits, "--parallel-commits"}, {onePC, &s.OnePC, "--one-pc"}} {
				if f.val == "" {
					continue
				}
				t, err := parseToggle(f.nm, f.val)
				if err != nil {
					return err
				}
				*f.t, changed = t, true
			}
			if changed {
				if err := db.SetTxnSwitches(ctx, s); err != nil {
					return err
				}
			}
			fmt.Println(s)
			if leases != "" {
				if err := db.SetLeasePlacement(ctx, leases); err != nil {
					return err
				}
			}
			lp, err := db.LeasePlacement(ctx)
			if err != nil {
				return err
			}
			fmt.Println("lease_placement=" + lp)
			var sched client.StatusSchedule
			if statusEncoding != "" {
				if sched, err = db.SetStatusEncoding(ctx, statusEncoding); err != nil {
					return err
				}
			} else if sched, err = db.StatusEncodingSchedule(ctx); err != nil {
				return err
			}
			printStatusSchedule(sched)
			return nil
		}),
	}
	addConnFlags(cmd)
	cmd.Flags().StringVar(&pipelining, "pipelining", "", "transactional pipelining: on, off or default")
	cmd.Flags().StringVar(&parallel, "parallel-commits", "", "parallel commits (needs pipelining): on, off or default")
	cmd.Flags().StringVar(&onePC, "one-pc", "", "one-phase commit: on, off or default")
	cmd.Flags().StringVar(&leases, "lease-placement", "", "where ranges' leases go: spread (default) or oracle (all with the oracle's host)")
	cmd.Flags().StringVar(&statusEncoding, "status-encoding", "", "move the status table to this encoding (v1, tickets or tickets-mix) for transactions started after the cutover")
	adminCmd.AddCommand(cmd)
}

func parseToggle(flag, v string) (client.Toggle, error) {
	switch v {
	case "on":
		return client.ToggleOn, nil
	case "off":
		return client.ToggleOff, nil
	case "default":
		return client.ToggleDefault, nil
	}
	return 0, usageErrorf("%s=%q: want on, off or default", flag, v)
}

// printStatusSchedule prints the status encoding schedule, one era a line.
func printStatusSchedule(s client.StatusSchedule) {
	if !s.Enabled {
		fmt.Printf("status_encoding=%s (fixed: the cluster was bootstrapped before encoding changes existed)\n", s.Eras[0].Encoding)
		return
	}
	fmt.Printf("status_encoding=%s schedule_version=%d valid_through=%d (%s UTC)\n", s.Eras[len(s.Eras)-1].Encoding, s.Version,
		s.ValidThrough, tsTime(s.ValidThrough))
	for _, e := range s.Eras {
		fmt.Printf("  from start_ts %d (%s UTC): %s\n", e.From, tsTime(e.From), e.Encoding)
	}
}
