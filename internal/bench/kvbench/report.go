package kvbench

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/canopy-db/canopy/internal/bench"
	"github.com/canopy-db/canopy/internal/bench/latency"
	"github.com/canopy-db/canopy/internal/bench/plot"
)

// Row is a Result with the settings it ran under, as printed and written.
type Row struct {
	// Cluster names the cluster's configuration, e.g. "fsync" or
	// "no fsync"; rows of different clusters are different series.
	Cluster    string
	ValueBytes int
	Keys       int
	Result
}

// Series names the row's line in plots: workload, and cluster if several.
func (r Row) Series(manyClusters bool) string {
	if manyClusters {
		return r.Workload + ", " + r.Cluster
	}
	return r.Workload
}

// TableHeader is the header of the table WriteTableRow prints under.
const TableHeader = "workload        cluster    conc       ops      secs      ops/s   p50 ms   p99 ms   max ms  errors  retries   cpu %  other cpu %  server cpu us/op"

// WriteTableRow prints one row, aligned under TableHeader. Figures are
// printed as measured: ops/s to 0.1, latencies to 0.01 ms; cpu % is the
// process's CPU time over the run's time, in percent of one CPU, and
// other cpu % the same for the rest of the machine (-1: unknown);
// server cpu us/op is the CPU time of Options.ServerPIDs per completed
// call, in microseconds ("-" if not measured).
func WriteTableRow(w io.Writer, r Row) {
	server := "-"
	if d, ok := r.ServerCPUPerOp(); ok {
		server = strconv.FormatFloat(Micros(d), 'f', 0, 64)
	}
	fmt.Fprintf(w, "%-15s %-10s %4d  %8d  %8.2f  %9.1f  %7.2f  %7.2f  %7.2f  %6d  %7d  %6.0f  %11.0f  %16s\n",
		r.Workload, r.Cluster, r.Concurrency, r.Ops, r.Elapsed.Seconds(), r.OpsPerSecond(),
		Millis(r.All.P50), Millis(r.All.P99), Millis(r.All.Max), r.Errors, r.Retries, r.CPUPercent(), r.OtherCPUPercent(), server)
}

// Micros converts a duration to fractional microseconds.
func Micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

var csvHeader = []string{
	"workload", "read_percent", "cluster", "concurrency", "value_bytes", "keys",
	"ops", "reads", "writes", "errors", "not_found", "seconds", "ops_per_second",
	"p50_ms", "p99_ms", "max_ms", "get_p50_ms", "get_p99_ms", "put_p50_ms", "put_p99_ms",
	"process_cpu_percent", "other_cpu_percent", "retries", "server_pids", "server_cpu_seconds",
	"server_cpu_us_per_op", "machine",
}

// CSVHeader returns the columns WriteCSV writes, in order; readers find
// columns by these names (internal/bench/compare does).
func CSVHeader() []string { return append([]string(nil), csvHeader...) }

// WriteCSV writes the rows, one per line after a header; the machine is a
// column so that the file stands on its own.
func WriteCSV(path string, rows []Row, m bench.Machine) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(csvHeader)
	ms := func(d float64) string { return strconv.FormatFloat(d, 'f', 3, 64) }
	// Latencies of an operation kind the workload did not issue are empty
	// cells, not zeros.
	pct := func(s latency.Snapshot) (p50, p99 string) {
		if s.Count == 0 {
			return "", ""
		}
		return ms(Millis(s.P50)), ms(Millis(s.P99))
	}
	for _, r := range rows {
		getP50, getP99 := pct(r.Read)
		putP50, putP99 := pct(r.Write)
		readPercent := "" // not a single-key mix (transactions)
		if r.ReadPercent >= 0 {
			readPercent = strconv.Itoa(r.ReadPercent)
		}
		serverSeconds, serverPerOp := "", ""
		if r.ServerPIDs > 0 {
			serverSeconds = strconv.FormatFloat(r.ServerCPU.Seconds(), 'f', 3, 64)
		}
		if d, ok := r.ServerCPUPerOp(); ok {
			serverPerOp = strconv.FormatFloat(Micros(d), 'f', 1, 64)
		}
		_ = w.Write([]string{
			r.Workload, readPercent, r.Cluster, strconv.Itoa(r.Concurrency),
			strconv.Itoa(r.ValueBytes), strconv.Itoa(r.Keys),
			strconv.FormatInt(r.Ops, 10), strconv.FormatInt(r.Reads, 10), strconv.FormatInt(r.Writes, 10),
			strconv.FormatInt(r.Errors, 10), strconv.FormatInt(r.NotFound, 10),
			strconv.FormatFloat(r.Elapsed.Seconds(), 'f', 3, 64), strconv.FormatFloat(r.OpsPerSecond(), 'f', 1, 64),
			ms(Millis(r.All.P50)), ms(Millis(r.All.P99)), ms(Millis(r.All.Max)),
			getP50, getP99, putP50, putP99,
			strconv.FormatFloat(r.CPUPercent(), 'f', 0, 64), strconv.FormatFloat(r.OtherCPUPercent(), 'f', 0, 64),
			strconv.FormatInt(r.Retries, 10), strconv.Itoa(r.ServerPIDs), serverSeconds, serverPerOp, m.String(),
		})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// WritePlot writes a PNG of throughput, p99 and p50 against concurrency,
// one line per workload (and cluster), with a shared legend.
func WritePlot(path, title string, rows []Row, m bench.Machine) error {
	// One colour per workload; the first cluster's lines solid, the
	// others' dashed.
	clusters, workloads := map[string]int{}, map[string]int{}
	for _, r := range rows {
		if _, ok := clusters[r.Cluster]; !ok {
			clusters[r.Cluster] = len(clusters)
		}
		if _, ok := workloads[r.Workload]; !ok {
			workloads[r.Workload] = len(workloads)
		}
	}
	idx := map[string]int{}
	var tput, p50, p99 []plot.Series
	for _, r := range rows {
		name := r.Series(len(clusters) > 1)
		i, ok := idx[name]
		if !ok {
			i = len(tput)
			idx[name] = i
			s := plot.Series{Name: name, Color: plot.Palette[workloads[r.Workload]%len(plot.Palette)], Dashed: clusters[r.Cluster] > 0}
			tput, p50, p99 = append(tput, s), append(p50, s), append(p99, s)
		}
		x := float64(r.Concurrency)
		tput[i].X, tput[i].Y = append(tput[i].X, x), append(tput[i].Y, r.OpsPerSecond())
		p50[i].X, p50[i].Y = append(p50[i].X, x), append(p50[i].Y, Millis(r.All.P50))
		p99[i].X, p99[i].Y = append(p99[i].X, x), append(p99[i].Y, Millis(r.All.P99))
	}
	img := plot.Grid(title, "measured on "+m.String(), 2, 560, 360,
		plot.LineChart{Title: "throughput", XLabel: "concurrent clients", YLabel: "ops/s", LogX: true, Series: tput, HideLegend: true},
		plot.LineChart{Title: "p99 latency", XLabel: "concurrent clients", YLabel: "ms", LogX: true, Series: p99, HideLegend: true},
		plot.LineChart{Title: "p50 latency", XLabel: "concurrent clients", YLabel: "ms", LogX: true, Series: p50, HideLegend: true},
		plot.Legend{Title: "workload, cluster", Series: tput},
	)
	return plot.WritePNG(path, img)
}
