package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/canopy-db/canopy/internal/bench/vlogbench"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/spf13/cobra"
)

func init() {
	var (
		dir, out, modes, sizes string
		budgetMiB              int64
		runTimeMax             time.Duration
		skip1, skip2, aligned  bool
		gcOverlap              bool
		cpuProfile             string
	)
	cmd := &cobra.Command{
		Use:   "vlog",
		Short: "Value log: write and space amplification of inline, rewrite, punch and pebble modes (seed 002)",
		Long: `Reproduces the hole-punching GC proposal's evaluation (seed 002) at a reduced scale:
case 1 runs 100% uniform updates for each value size and mode (records = budget / value size,
updates = 4 x records); case 2 runs 64 KiB values with a growing update volume, punch against
rewrite. Prints a table, writes vlog.csv and PNG plots into --out.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			c := vlogbench.Config{
				Dir: dir, BudgetBytes: budgetMiB << 20, RunTimeMax: runTimeMax,
				SkipCase1: skip1, SkipCase2: skip2, Progress: os.Stderr, AlignedPunch: aligned, GCOverlap: gcOverlap,
			}
			if modes != "" {
				for _, s := range strings.Split(modes, ",") {
					m, err := storage.ParseMode(strings.TrimSpace(s))
					if err != nil {
						return err
					}
					c.Modes = append(c.Modes, m)
				}
			}
			if sizes != "" {
				for _, s := range strings.Split(sizes, ",") {
					var kib int
					if _, err := fmt.Sscanf(strings.TrimSpace(s), "%d", &kib); err != nil || kib <= 0 {
						return fmt.Errorf("bad --sizes-kib entry %q", s)
					}
					c.ValueSizesBytes = append(c.ValueSizesBytes, kib<<10)
				}
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if cpuProfile != "" {
				pf, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer pf.Close()
				if err := pprof.StartCPUProfile(pf); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			host, _ := os.Hostname()
			fmt.Printf("canopy bench vlog: %s, %d CPUs (GOMAXPROCS %d), budget %d MiB, started %s\n",
				host, runtime.NumCPU(), runtime.GOMAXPROCS(0), budgetMiB, time.Now().UTC().Format(time.RFC3339))
			start := time.Now()
			rs, err := vlogbench.Run(c)
			if len(rs) > 0 {
				if terr := vlogbench.WriteTable(os.Stdout, rs); terr != nil {
					return terr
				}
				csvPath := filepath.Join(out, "vlog.csv")
				if cerr := vlogbench.WriteCSV(csvPath, rs); cerr != nil {
					return cerr
				}
				paths, perr := vlogbench.WritePlots(out, rs)
				if perr != nil {
					return perr
				}
				fmt.Printf("\nwrote %s %s (total %.0f s)\n", csvPath, strings.Join(paths, " "), time.Since(start).Seconds())
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", filepath.Join(os.TempDir(), "canopy-bench-vlog"), "scratch directory (must be on a file system that can punch holes, e.g. ext4)")
	f.StringVar(&out, "out", "docs/vlog", "directory for vlog.csv and the PNG plots")
	f.Int64Var(&budgetMiB, "budget-mib", 64, "live data per run in MiB (records = budget / value size)")
	f.StringVar(&modes, "modes", "", "case 1 modes, comma separated (default inline,rewrite,punch,pebble)")
	f.StringVar(&sizes, "sizes-kib", "", "case 1 value sizes in KiB, comma separated (default 1,2,4,...,512)")
	f.DurationVar(&runTimeMax, "run-time-max", 120*time.Second, "bound on the update phase of one run")
	f.BoolVar(&aligned, "aligned-punch", true, "also run punch with the proposal's layout (large records block aligned) for values of 4 KiB and more")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile here")
	f.BoolVar(&gcOverlap, "gc-overlap", false, "run GC concurrently with the updates (at most one GC point behind) instead of in the foreground; figures then depend on timing")
	f.BoolVar(&skip1, "skip-case1", false, "skip case 1")
	f.BoolVar(&skip2, "skip-case2", false, "skip case 2")
	benchCmd.AddCommand(cmd)
}
