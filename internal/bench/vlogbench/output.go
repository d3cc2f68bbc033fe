package vlogbench

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
)

// WriteTable prints one row per run.
func WriteTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tmode\tvalue\trecords\tupdates\tWA engine\tWA io\tspace amp\tmax\tsettled\tblob SA\tupdates/s\tGC s\tCPU us/upd\tload\tGC rewritten MiB\tpunched MiB\tpadding MiB\t")
	for _, r := range rs {
		to := ""
		if r.TimedOut {
			to = " (time limit)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d KiB\t%d\t%d%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t%.1f\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t\n",
			r.Case, r.Label(), r.ValueBytes>>10, r.Records, r.Updates, to, r.WriteAmp(), r.WriteAmpIO(),
			r.SpaceAmp(), r.SpaceAmpMax(), r.SpaceAmpSettled(), r.BlobSpaceAmp(),
			r.OpsPerSec(), r.GCSeconds, r.CPUMicrosPerUpdate(), r.LoadAvg, mib(r.GCRewrittenBytes), mib(r.GCPunchedBytes), mib(r.PaddingBytes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Case 2: the proposal's Figure 6 ratio.
	byKey := map[[2]int]map[string]Result{}
	var order [][2]int
	for _, r := range rs {
		if r.Case != 2 {
			continue
		}
		k := [2]int{r.ValueBytes, r.Updates}
		if byKey[k] == nil {
			byKey[k] = map[string]Result{}
			order = append(order, k)
		}
		byKey[k][r.Label()] = r
	}
	if len(order) > 0 {
		fmt.Fprintln(w, "\ncase 2 (Figure 6): bytes written by punch / bytes written by rewrite")
		for _, k := range order {
			p, rw := byKey[k]["punch"], byKey[k]["rewrite"]
			if rw.EngineWrittenBytes == 0 {
				continue
			}
			fmt.Fprintf(w, "  updates = %.0f x records (rewrite wrote %.1f MiB): engine %.3f, io %.3f\n",
				float64(k[1])/float64(rw.Records), mib(rw.EngineWrittenBytes),
				float64(p.EngineWrittenBytes)/float64(rw.EngineWrittenBytes),
				float64(p.IOWrittenBytes)/float64(rw.IOWrittenBytes))
		}
	}
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// WriteCSV writes every run to path.
func WriteCSV(path string, rs []Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"case", "mode", "value_bytes", "records", "updates", "user_bytes",
		"engine_written_bytes", "io_written_bytes", "write_amp_engine", "write_amp_io",
		"live_bytes", "allocated_bytes", "allocated_max_bytes", "settled_allocated_bytes", "blob_allocated_bytes",
		"space_amp", "space_amp_max", "space_amp_settled", "blob_space_amp",
		"seconds", "gc_seconds", "cpu_seconds", "load_avg_1m", "updates_per_sec", "gc_rewritten_bytes", "gc_punched_bytes", "padding_bytes", "timed_out"})
	i := strconv.Itoa
	i64 := func(n int64) string { return strconv.FormatInt(n, 10) }
	fl := func(x float64) string { return strconv.FormatFloat(x, 'f', 4, 64) }
	for _, r := range rs {
		_ = w.Write([]string{i(r.Case), r.Label(), i(r.ValueBytes), i(r.Records), i(r.Updates), i64(r.UserBytes),
			i64(r.EngineWrittenBytes), i64(r.IOWrittenBytes), fl(r.WriteAmp()), fl(r.WriteAmpIO()),
			i64(r.LiveBytes), i64(r.AllocatedBytes), i64(r.AllocatedMaxBytes), i64(r.SettledAllocatedBytes), i64(r.BlobAllocatedBytes),
			fl(r.SpaceAmp()), fl(r.SpaceAmpMax()), fl(r.SpaceAmpSettled()), fl(r.BlobSpaceAmp()),
			fl(r.Seconds), fl(r.GCSeconds), fl(r.CPUSeconds), fl(r.LoadAvg), fl(r.OpsPerSec()), i64(r.GCRewrittenBytes), i64(r.GCPunchedBytes), i64(r.PaddingBytes),
			strconv.FormatBool(r.TimedOut)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
