package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/canopy-db/canopy/internal/bench/compare"
	"github.com/spf13/cobra"
)

func init() {
	var (
		in, out, a, b, title string
		notes                []string
	)
	cmd := &cobra.Command{
		Use:   "compare",
		Short: "Side-by-side table of two systems' bench kv/txn runs, with ratios (markdown, CSV, PNG)",
		Long: `Reads every *.csv under --in (files written by canopy bench kv and canopy bench
txn, one or more runs each), pairs the runs of --a and --b (their "cluster"
column) that ran the same workload at the same concurrency, and writes
<out>.md, <out>.csv and <out>.png: for throughput, p50, p99 and the server
processes' CPU time per operation, the figure of each system and the ratio
a / b. The markdown is also printed. scripts/bench-vs-etcd.sh runs it.`,
		Example: `  canopy bench compare --in /tmp/vs-etcd/raw --out /tmp/vs-etcd/compare --note "etcd 3.4.23"`,
		RunE: func(cmd *cobra.Command, args []string) error {
			paths, err := filepath.Glob(filepath.Join(in, "*.csv"))
			if err != nil {
				return err
			}
			if len(paths) == 0 {
				return fmt.Errorf("no *.csv under %s", in)
			}
			sort.Strings(paths)
			points, err := compare.ReadFiles(paths)
			if err != nil {
				return err
			}
			rows, err := compare.Build(points, a, b)
			if err != nil {
				return err
			}
			rep := compare.Report{Title: title, A: a, B: b, Notes: notes, Rows: rows}
			if err := compare.WriteMarkdown(os.Stdout, rep); err != nil {
				return err
			}
			if out == "" {
				return nil
			}
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return err
			}
			f, err := os.Create(out + ".md")
			if err != nil {
				return err
			}
			if err := compare.WriteMarkdown(f, rep); err != nil {
				_ = f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if err := compare.WriteCSV(out+".csv", rep); err != nil {
				return err
			}
			if err := compare.WritePlot(out+".png", rep); err != nil {
				return err
			}
			fmt.Printf("\nwrote %s.md, %s.csv and %s.png\n", out, out, out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&in, "in", "", "directory of the per-run CSV files")
	f.StringVar(&out, "out", "", "prefix of the .md, .csv and .png files (empty: print only)")
	f.StringVar(&a, "a", "canopy", "system of the numerator of every ratio (a \"cluster\" column value)")
	f.StringVar(&b, "b", "etcd", "system of the denominator")
	f.StringVar(&title, "title", "Canopy against etcd", "title of the table and the plot")
	f.StringArrayVar(&notes, "note", nil, "a line under the title (repeatable): versions, settings")
	_ = cmd.MarkFlagRequired("in")
	benchCmd.AddCommand(cmd)
}
