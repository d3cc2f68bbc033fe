package compare

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/canopy-db/canopy/internal/bench/plot"
)

// Report is what WriteMarkdown, WriteCSV and WritePlot write.
type Report struct {
	Title string
	// A and B name the systems; ratios are A / B.
	A, B string
	// Notes are lines printed under the title (versions, settings).
	Notes []string
	Rows  []Row
}

func format(v float64, ok bool, digits int) string {
	if !ok {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', digits, 64)
}

// machines returns the machine descriptions of the first and last run
// (each names its date and load average at start).
func (rep Report) machines() (first, last string) {
	for _, r := range rep.Rows {
		for _, p := range []*Point{r.A, r.B} {
			if p == nil || p.Machine == "" {
				continue
			}
			if first == "" {
				first = p.Machine
			}
			last = p.Machine
		}
	}
	return first, last
}

// maxOtherCPU is the largest other-CPU percentage of any run, and false if
// no run knows it.
func (rep Report) maxOtherCPU() (float64, bool) {
	m, ok := 0.0, false
	for _, r := range rep.Rows {
		for _, p := range []*Point{r.A, r.B} {
			if p != nil && p.OtherCPUPercent >= 0 {
				m, ok = max(m, p.OtherCPUPercent), true
			}
		}
	}
	return m, ok
}

// WriteMarkdown writes the title, notes, machine, the table (for each
// metric: A, B and A / B; then retries and errors) and the columns'
// meaning.
func WriteMarkdown(w io.Writer, rep Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n", rep.Title)
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	first, last := rep.machines()
	if first != "" {
		fmt.Fprintf(&b, "- Machine, first run: %s\n", first)
		if last != first {
			fmt.Fprintf(&b, "- Machine, last run: %s\n", last)
		}
	}
	if m, ok := rep.maxOtherCPU(); ok {
		fmt.Fprintf(&b, "- Other work on the machine: at most %.0f%% of one CPU during any run (CPU time neither the bench client nor the measured servers used)\n", m)
	}
	b.WriteString("\n| workload | clients |")
	align := "|---|---:|"
	for _, m := range Metrics {
		fmt.Fprintf(&b, " %s %s | %s %s | %s / %s |", rep.A, m.Name, rep.B, m.Name, rep.A, rep.B)
		align += "---:|---:|---:|"
	}
	fmt.Fprintf(&b, " %s retries | %s retries | errors %s / %s | other CPU %% %s / %s |\n", rep.A, rep.B, rep.A, rep.B, rep.A, rep.B)
	align += "---:|---:|---:|---:|"
	b.WriteString(align + "\n")
	for _, r := range rep.Rows {
		fmt.Fprintf(&b, "| %s | %d |", r.Workload, r.Concurrency)
		for _, m := range Metrics {
			a, aOK, bv, bOK, ratio, ratioOK := r.Values(m)
			fmt.Fprintf(&b, " %s | %s | %s |", format(a, aOK, m.Digits), format(bv, bOK, m.Digits), format(ratio, ratioOK, 2))
		}
		retries := func(p *Point) string {
			if p == nil {
				return "–"
			}
			return strconv.FormatInt(p.Retries, 10)
		}
		errs := func(p *Point) string {
			if p == nil {
				return "–"
			}
			return strconv.FormatInt(p.Errors, 10)
		}
		other := func(p *Point) string {
			if p == nil || p.OtherCPUPercent < 0 {
				return "–"
			}
			return strconv.FormatFloat(p.OtherCPUPercent, 'f', 0, 64)
		}
		fmt.Fprintf(&b, " %s | %s | %s / %s | %s / %s |\n", retries(r.A), retries(r.B), errs(r.A), errs(r.B), other(r.A), other(r.B))
	}
	b.WriteString(`
ops/s: completed operations per second of measured time (txn: committed transactions).
p50, p99: latency of a completed operation as the client sees it (txn: the whole transaction,
retries included). server CPU µs/op: user + system CPU time of the system's server processes
over the measured time (/proc/<pid>/stat), divided by the completed operations. retries: attempts
after the first, over the run. other CPU %: CPU time the rest of the machine (neither the bench
client nor the measured servers) used during the run, in percent of one CPU. A ratio above 1
means more of it for ` + rep.A + `: better for ops/s, worse for latency and CPU. "–": not measured,
or nothing to divide by.
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteCSV writes one line per row: workload, concurrency, then for each
// metric A, B and A / B (empty cells where missing), then retries and
// errors.
func WriteCSV(path string, rep Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	header := []string{"workload", "concurrency"}
	for _, m := range Metrics {
		header = append(header, rep.A+"_"+m.Key, rep.B+"_"+m.Key, "ratio_"+m.Key)
	}
	header = append(header, rep.A+"_retries", rep.B+"_retries", rep.A+"_errors", rep.B+"_errors", rep.A+"_ops", rep.B+"_ops",
		rep.A+"_other_cpu_percent", rep.B+"_other_cpu_percent")
	_ = w.Write(header)
	cell := func(v float64, ok bool, digits int) string {
		if !ok {
			return ""
		}
		return strconv.FormatFloat(v, 'f', digits, 64)
	}
	count := func(p *Point, f func(*Point) int64) string {
		if p == nil {
			return ""
		}
		return strconv.FormatInt(f(p), 10)
	}
	for _, r := range rep.Rows {
		rec := []string{r.Workload, strconv.Itoa(r.Concurrency)}
		for _, m := range Metrics {
			a, aOK, bv, bOK, ratio, ratioOK := r.Values(m)
			rec = append(rec, cell(a, aOK, 3), cell(bv, bOK, 3), cell(ratio, ratioOK, 4))
		}
		retries := func(p *Point) int64 { return p.Retries }
		errs := func(p *Point) int64 { return p.Errors }
		ops := func(p *Point) int64 { return p.Ops }
		other := func(p *Point) string {
			if p == nil || p.OtherCPUPercent < 0 {
				return ""
			}
			return strconv.FormatFloat(p.OtherCPUPercent, 'f', 0, 64)
		}
		rec = append(rec, count(r.A, retries), count(r.B, retries), count(r.A, errs), count(r.B, errs), count(r.A, ops), count(r.B, ops),
			other(r.A), other(r.B))
		_ = w.Write(rec)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// WritePlot writes a PNG: one column of panels per workload, one row per
// metric, each a line per system against concurrency (log scale).
func WritePlot(path string, rep Report) error {
	if len(rep.Rows) == 0 {
		return fmt.Errorf("compare: no rows to plot")
	}
	var workloads []string
	for _, r := range rep.Rows {
		if len(workloads) == 0 || workloads[len(workloads)-1] != r.Workload {
			workloads = append(workloads, r.Workload)
		}
	}
	var panels []plot.Panel
	legend := []plot.Series{{Name: rep.A, Color: plot.Palette[0]}, {Name: rep.B, Color: plot.Palette[1]}}
	for _, m := range Metrics {
		for _, wl := range workloads {
			sa := plot.Series{Name: rep.A, Color: plot.Palette[0]}
			sb := plot.Series{Name: rep.B, Color: plot.Palette[1]}
			for _, r := range rep.Rows {
				if r.Workload != wl {
					continue
				}
				a, aOK, bv, bOK, _, _ := r.Values(m)
				x := float64(r.Concurrency)
				if aOK {
					sa.X, sa.Y = append(sa.X, x), append(sa.Y, a)
				}
				if bOK {
					sb.X, sb.Y = append(sb.X, x), append(sb.Y, bv)
				}
			}
			// The plot's bitmap font is ASCII: "µs" would print as "?s".
			name := strings.ReplaceAll(m.Name, "µ", "u")
			unit := name
			if i := strings.IndexByte(unit, ' '); i >= 0 {
				unit = unit[i+1:] // "p50 ms" -> "ms"
			}
			panels = append(panels, plot.LineChart{
				Title: wl + ": " + name, XLabel: "concurrent clients", YLabel: unit,
				LogX: true, Series: []plot.Series{sa, sb}, HideLegend: true,
			})
		}
	}
	panels = append(panels, plot.Legend{Title: "system", Series: legend})
	first, _ := rep.machines()
	img := plot.Grid(rep.Title, "measured on "+first, len(workloads), 420, 280, panels...)
	return plot.WritePNG(path, img)
}
