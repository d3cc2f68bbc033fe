package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/canopy-db/canopy/internal/buildinfo"
	"github.com/spf13/cobra"
)

func init() {
	bi := buildinfo.Get()
	rootCmd.Version = bi.Version
	rootCmd.SetVersionTemplate(versionText(bi))
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print this binary's version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch output {
			case "table", "":
				fmt.Print(versionText(bi))
			case "json":
				return json.NewEncoder(os.Stdout).Encode(bi)
			default:
				return usageErrorf("--output %q: want table or json", output)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	rootCmd.AddCommand(cmd)
}

func versionText(bi buildinfo.Info) string {
	mod := ""
	if bi.Modified {
		mod = " (modified)"
	}
	return fmt.Sprintf("canopy %s\ncommit: %s%s\ngo: %s\nplatform: %s\n", bi.Version, bi.Commit, mod, bi.GoVersion, bi.Platform)
}
