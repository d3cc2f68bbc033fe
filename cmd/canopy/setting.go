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
	var pipelining, parallel, onePC string
	cmd := &cobra.Command{
		Use:   "setting",
		Short: "Show or set the cluster's transaction switches (pipelining, parallel commits, 1PC)",
		Long: "Without flags, prints the cluster's transaction switches. Each flag sets one switch to on, off or\n" +
			"default (on). Clients read the setting at start and every few seconds; a transaction's own options\n" +
			"and its client's options override it.",
		Args: cobra.NoArgs,
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
			return nil
		}),
	}
	addConnFlags(cmd)
	cmd.Flags().StringVar(&pipelining, "pipelining", "", "transactional pipelining: on, off or default")
	cmd.Flags().StringVar(&parallel, "parallel-commits", "", "parallel commits (needs pipelining): on, off or default")
	cmd.Flags().StringVar(&onePC, "one-pc", "", "one-phase commit: on, off or default")
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
