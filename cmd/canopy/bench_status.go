package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/canopy-db/canopy/internal/bench"
	"github.com/canopy-db/canopy/internal/bench/plot"
	sb "github.com/canopy-db/canopy/internal/bench/statusbench"
	"github.com/spf13/cobra"
)

// statusExperiments are the values of canopy bench status --experiment.
var statusExperiments = []string{"hotspots", "size", "latency", "loaders", "e2e"}

type benchStatusOptions struct {
	experiments []string
	out         string
	dir         string
	hot         sb.HotSpotOptions
	sizeCounts  []int
	lat         sb.LatencyOptions
	load        sb.LoaderOptions
	e2e         sb.EndToEndOptions
}

func init() {
	var o benchStatusOptions
	cmd := &cobra.Command{
		Use:   "status",
		Short: "The transaction status table's experiments: hot spots, size, read latency, loaders, end to end (v1 against tickets)",
		Long: `Reproduces the experiments of the tickets record (seed 003, AtlasDB ADR 16) on
Canopy, one or more per run (--experiment, comma separated):

  hotspots  a 3-node cluster per encoding, the status table split into
            --ranges ranges in turn; the share of a run of --commits
            consecutive commits' status records taken by each range and
            node (leaseholder). Target: tickets' hottest range at most 1.2x
            its fair share; v1 one range takes all.
  size      status records written straight into one store (no cluster)
            through each encoding, --size-txns of them; bytes per record,
            total, index and filter sizes after a full compaction, for
            each store setting (v1, tickets; with and without the status
            table's Bloom filter; 16 and 64 KiB blocks).
  latency   point lookups of status records in such a store of
            --latency-txns records, --concurrency readers, --hit-rates,
            p50/p95/p99 per setting: the shape of the record's two tables.
  loaders   100x100 static, 1000x10 static and 16x500 dynamic cell sets in
            a cluster's status table, loaded whole by CL1 (per column),
            full batching (up to --cc) and CL2 (selective batching), by
            --readers concurrent readers; beside the record's figures.
  e2e       a scan over --e2e-keys keys holding intents of --e2e-txns
            committed, unresolved transactions: batched lookups and cache
            against one lookup per transaction.

Each experiment prints its tables and writes <out>-<experiment>.csv and
.png. Every run is bounded by its duration and count flags.`,
		Example: `  canopy bench status --experiment hotspots,loaders
  canopy bench status --experiment size --size-txns 1000000,10000000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchStatus(ctx, o, "canopy bench status "+strings.Join(os.Args[3:], " "))
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.experiments, "experiment", nil, "experiments to run: "+strings.Join(statusExperiments, ", ")+" (required)")
	f.StringVar(&o.out, "out", "docs/bench/status", "prefix of the CSV and PNG files (empty: write none)")
	f.StringVar(&o.dir, "dir", "", "where the size and latency stores are made (default: the system's temporary directory)")
	f.IntSliceVar(&o.hot.Ranges, "ranges", []int{4, 8, 16}, "hotspots: status ranges of the runs, ascending powers of two")
	f.IntVar(&o.hot.Commits, "commits", 2000, "hotspots: consecutive commits per run")
	f.IntVar(&o.hot.Concurrency, "hot-concurrency", 16, "hotspots: committing workers")
	f.DurationVar(&o.hot.RunMax, "run-max", 2*time.Minute, "hotspots: bound on one run")
	f.IntSliceVar(&o.sizeCounts, "size-txns", []int{1_000_000}, "size: transactions per store (at most 20,000,000)")
	f.IntVar(&o.lat.Txns, "latency-txns", 1_000_000, "latency: transactions in each store")
	f.IntSliceVar(&o.lat.Concurrency, "concurrency", []int{100, 250}, "latency: concurrent readers")
	f.IntSliceVar(&o.lat.HitRates, "hit-rates", []int{100, 50}, "latency: percent of lookups that find a record")
	f.DurationVar(&o.lat.Duration, "latency-duration", 5*time.Second, "latency: measured time per cell")
	f.Int64Var(&o.lat.LookupsMax, "lookups-max", 2_000_000, "latency: lookups per cell (at most)")
	f.Int64Var(&o.lat.CacheBytes, "cache-bytes", 4<<20, "latency: block cache of each store (small, so that blocks are read from the files)")
	f.IntVar(&o.lat.Tables, "tables", 8, "latency: L0 tables of each store (one flush per 1/tables of the records, no compaction)")
	f.IntVar(&o.load.CC, "cc", 50_000, "loaders: cross column batch limit (CC)")
	f.IntVar(&o.load.SQ, "sq", 200, "loaders: single query limit (SQ)")
	f.IntSliceVar(&o.load.Readers, "readers", []int{1, 10}, "loaders: concurrent readers")
	f.DurationVar(&o.load.Duration, "loader-duration", 5*time.Second, "loaders: measured time per case")
	f.IntVar(&o.load.LoadsMax, "loads-max", 100, "loaders: loads per reader per case (at most)")
	f.IntVar(&o.load.InFlightMax, "in-flight", 64, "loaders: requests of one load in flight")
	f.IntVar(&o.e2e.Keys, "e2e-keys", 10_000, "e2e: keys scanned")
	f.IntVar(&o.e2e.Txns, "e2e-txns", 1_000, "e2e: transactions whose intents the keys hold")
	f.IntVar(&o.e2e.Trials, "trials", 3, "e2e: trials per variant")
	f.DurationVar(&o.e2e.TrialMax, "trial-max", 5*time.Minute, "e2e: bound on one trial")
	benchCmd.AddCommand(cmd)
}

func runBenchStatus(ctx context.Context, o benchStatusOptions, command string) error {
	if len(o.experiments) == 0 {
		return usageErrorf("--experiment is required: one or more of %s", strings.Join(statusExperiments, ", "))
	}
	for _, e := range o.experiments {
		if !slices.Contains(statusExperiments, e) {
			return usageErrorf("--experiment %q: want one of %s", e, strings.Join(statusExperiments, ", "))
		}
	}
	for i, n := range o.hot.Ranges {
		if n < 1 || n > 256 || n&(n-1) != 0 || (i > 0 && n <= o.hot.Ranges[i-1]) {
			return usageErrorf("--ranges must be ascending powers of two in [1, 256]")
		}
	}
	for _, n := range append(slices.Clone(o.sizeCounts), o.lat.Txns) {
		if n < 1 || n > 20_000_000 {
			return usageErrorf("--size-txns and --latency-txns must be in [1, 20,000,000]")
		}
	}
	for _, c := range append(slices.Clone(o.lat.Concurrency), o.load.Readers...) {
		if c < 1 || c > 4096 {
			return usageErrorf("--concurrency and --readers must be in [1, 4096]")
		}
	}
	for _, h := range o.lat.HitRates {
		if h < 0 || h > 100 {
			return usageErrorf("--hit-rates must be percentages")
		}
	}
	if o.lat.Tables < 1 || o.lat.Tables > 1000 {
		return usageErrorf("--tables must be in [1, 1000]")
	}
	if o.hot.Commits < 1 || o.hot.Concurrency < 1 || o.load.InFlightMax < 1 || o.load.LoadsMax < 1 || o.e2e.Trials < 1 || o.lat.LookupsMax < 1 {
		return usageErrorf("--commits, --hot-concurrency, --in-flight, --loads-max, --trials and --lookups-max must be positive")
	}
	m := bench.ThisMachine()
	fmt.Printf("canopy bench status\n  command:  %s\n  machine:  %s\n\n", command, m)
	progress := func(s string) { fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().UTC().Format("15:04:05"), s) }
	o.lat.Dir = o.dir
	for _, e := range o.experiments {
		var tables []sb.Table
		var panels []plot.Panel
		switch e {
		case "hotspots":
			runs, err := sb.HotSpots(ctx, o.hot, progress)
			if err != nil {
				return fmt.Errorf("hotspots: %w", err)
			}
			s, r := sb.HotSpotTables(runs)
			tables = []sb.Table{s, r}
			panels = hotSpotPanels(runs)
		case "size":
			rows, err := sb.Size(ctx, o.dir, sb.RecordStoreConfigs, o.sizeCounts, 1, progress)
			if err != nil {
				return fmt.Errorf("size: %w", err)
			}
			tables = []sb.Table{sb.SizeTable(rows)}
			panels = sizePanels(rows, o.sizeCounts)
		case "latency":
			cells, err := sb.Latency(ctx, o.lat, progress)
			if err != nil {
				return fmt.Errorf("latency: %w", err)
			}
			tables = sb.LatencyTables(cells, sb.RecordStoreConfigs, o.lat.Concurrency, o.lat.HitRates)
			panels = latencyPanels(cells, o.lat)
		case "loaders":
			cells, err := sb.LoaderBench(ctx, o.load, progress)
			if err != nil {
				return fmt.Errorf("loaders: %w", err)
			}
			tables = []sb.Table{sb.LoaderTable(cells)}
			panels = loaderPanels(cells, o.load.Readers)
		case "e2e":
			cells, err := sb.EndToEnd(ctx, o.e2e, progress)
			if err != nil {
				return fmt.Errorf("e2e: %w", err)
			}
			tables = []sb.Table{sb.EndToEndTable(cells)}
			panels = endToEndPanels(cells)
		}
		for _, t := range tables {
			t.Print(os.Stdout)
			fmt.Println()
		}
		if o.out == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(o.out+"-x"), 0o755); err != nil {
			return err
		}
		for i, t := range tables {
			path := fmt.Sprintf("%s-%s.csv", o.out, e)
			if i > 0 {
				path = fmt.Sprintf("%s-%s-%d.csv", o.out, e, i+1)
			}
			if err := t.WriteCSV(path, m.String()); err != nil {
				return err
			}
			fmt.Printf("wrote %s\n", path)
		}
		png := fmt.Sprintf("%s-%s.png", o.out, e)
		if err := plot.WritePNG(png, plot.Grid("canopy bench status --experiment "+e, m.String(), 2, 560, 360, panels...)); err != nil {
			return err
		}
		fmt.Printf("wrote %s\n\n", png)
	}
	return nil
}

func hotSpotPanels(runs []sb.HotSpotRun) []plot.Panel {
	var groups, encs []string
	for _, r := range runs {
		if g := fmt.Sprintf("%d ranges", r.Ranges); !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
		if !slices.Contains(encs, r.Encoding) {
			encs = append(encs, r.Encoding)
		}
	}
	var hottest, node []plot.BarSeries
	for _, e := range encs {
		h, n := plot.BarSeries{Name: e}, plot.BarSeries{Name: e}
		for _, g := range groups {
			hv, nv := 0.0, 0.0
			for _, r := range runs {
				if r.Encoding == e && fmt.Sprintf("%d ranges", r.Ranges) == g {
					hv = r.Hottest()
					best := 0
					for _, c := range r.PerNode {
						best = max(best, c)
					}
					nv = 100 * float64(best) / float64(max(r.Records, 1))
				}
			}
			h.Values, n.Values = append(h.Values, hv), append(n.Values, nv)
		}
		hottest, node = append(hottest, h), append(node, n)
	}
	return []plot.Panel{
		plot.BarChart{Title: "hottest status range / fair share (target <= 1.2)", XLabel: "status ranges", YLabel: "x fair share",
			Groups: groups, Series: hottest, ValueLabels: true},
		plot.BarChart{Title: "busiest node's share of status writes", XLabel: "status ranges", YLabel: "%", Groups: groups,
			Series: node, ValueLabels: true},
	}
}

func sizePanels(rows []sb.SizeRow, counts []int) []plot.Panel {
	var groups []string
	for _, n := range counts {
		groups = append(groups, fmt.Sprintf("%d txns", n))
	}
	var perTxn, filter []plot.BarSeries
	for _, cfg := range sb.RecordStoreConfigs {
		a, b := plot.BarSeries{Name: cfg.Name}, plot.BarSeries{Name: cfg.Name}
		for _, n := range counts {
			for _, r := range rows {
				if r.Config.Name == cfg.Name && r.Txns == n {
					a.Values = append(a.Values, float64(r.Sizes.TotalBytes)/float64(n))
					b.Values = append(b.Values, float64(r.Sizes.FilterBytes)/(1<<20))
				}
			}
		}
		perTxn, filter = append(perTxn, a), append(filter, b)
	}
	return []plot.Panel{
		plot.BarChart{Title: "bytes on disk per status record", XLabel: "transactions", YLabel: "bytes", Groups: groups, Series: perTxn},
		plot.BarChart{Title: "filter size", XLabel: "transactions", YLabel: "MiB", Groups: groups, Series: filter},
	}
}

func latencyPanels(cells []sb.LatencyCell, o sb.LatencyOptions) []plot.Panel {
	var panels []plot.Panel
	for _, hit := range o.HitRates {
		for _, q := range []string{"p50", "p99"} {
			var groups []string
			for _, c := range o.Concurrency {
				groups = append(groups, fmt.Sprintf("%d readers", c))
			}
			var series []plot.BarSeries
			for _, cfg := range sb.RecordStoreConfigs {
				s := plot.BarSeries{Name: cfg.Name}
				for _, c := range o.Concurrency {
					v := 0.0
					for _, x := range cells {
						if x.Config == cfg.Name && x.Concurrency == c && x.HitRate == hit {
							v = sb.Msf(map[string]time.Duration{"p50": x.P50, "p99": x.P99}[q])
						}
					}
					s.Values = append(s.Values, v)
				}
				series = append(series, s)
			}
			panels = append(panels, plot.BarChart{Title: fmt.Sprintf("lookup %s, hit rate %d%%", q, hit), XLabel: "concurrency", YLabel: "ms",
				Groups: groups, Series: series})
		}
	}
	return panels
}

func loaderPanels(cells []sb.LoaderCell, readers []int) []plot.Panel {
	var panels []plot.Panel
	for _, r := range readers {
		var groups []string
		for _, w := range sb.RecordWorkloads {
			groups = append(groups, w.Name)
		}
		var series []plot.BarSeries
		for _, l := range sb.Loaders(1, 1) {
			s := plot.BarSeries{Name: l.Name}
			for _, w := range sb.RecordWorkloads {
				v := 0.0
				for _, c := range cells {
					if c.Workload == w.Name && c.Loader == l.Name && c.Readers == r {
						v = sb.Msf(c.P50)
					}
				}
				s.Values = append(s.Values, v)
			}
			series = append(series, s)
		}
		panels = append(panels, plot.BarChart{Title: fmt.Sprintf("p50 of one load, %d reader(s)", r), XLabel: "workload", YLabel: "ms",
			Groups: groups, Series: series, ValueLabels: true})
	}
	return panels
}

func endToEndPanels(cells []sb.EndToEndCell) []plot.Panel {
	var groups []string
	bySeries := map[string][]float64{}
	var names []string
	for _, c := range cells {
		g := fmt.Sprintf("trial %d", c.Trial)
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
		if _, ok := bySeries[c.Variant]; !ok {
			names = append(names, c.Variant)
		}
		bySeries[c.Variant] = append(bySeries[c.Variant], sb.Msf(c.Scan))
	}
	var series []plot.BarSeries
	for _, n := range names {
		series = append(series, plot.BarSeries{Name: n, Values: bySeries[n]})
	}
	return []plot.Panel{plot.BarChart{Title: "scan time", XLabel: "trial", YLabel: "ms", Groups: groups, Series: series, ValueLabels: true}}
}
