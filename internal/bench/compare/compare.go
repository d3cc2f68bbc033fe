// Package compare puts the runs of two systems side by side: it reads the
// per-run CSV files of `canopy bench kv` and `canopy bench txn`
// (kvbench.WriteCSV), pairs the rows of system A (the numerator, say
// "canopy") and system B (the denominator, say "etcd") that ran the same
// workload at the same concurrency, and writes one table with the ratios
// A / B of throughput, p50 and p99 latency and server CPU time per
// operation, as markdown, CSV and a PNG. `canopy bench compare` drives it;
// scripts/bench-vs-etcd.sh calls that after its runs.
//
// The system of a row is its "cluster" column. A ratio is left out
// (written "–" or an empty cell) where either side is missing or zero;
// it is never guessed. Two rows for the same system, workload and
// concurrency are an error: the files are from two different experiments.
package compare

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
)

// Point is one run of one system, as read from a CSV row.
type Point struct {
	System      string // the "cluster" column
	Workload    string
	Concurrency int
	ValueBytes  int
	Keys        int
	Ops         int64
	Errors      int64
	Retries     int64
	Seconds     float64
	OpsPerSec   float64
	P50Ms       float64
	P99Ms       float64
	// ServerCPUPerOpUs is the server processes' CPU time per operation in
	// microseconds; HasServerCPU is false where it was not measured.
	ServerCPUPerOpUs float64
	HasServerCPU     bool
	// OtherCPUPercent is the rest of the machine's CPU during the run, in
	// percent of one CPU (-1: unknown).
	OtherCPUPercent float64
	Machine         string
	// File is where the row was read (for error messages).
	File string
}

// requiredColumns are the CSV columns ReadCSV needs; others are optional.
var requiredColumns = []string{"workload", "cluster", "concurrency", "ops", "seconds", "ops_per_second", "p50_ms", "p99_ms"}

// ErrFormat is returned (wrapped) for a CSV file that is not a per-run
// benchmark file.
var ErrFormat = errors.New("compare: not a bench kv/txn CSV file")

// ReadCSV reads the rows of one per-run CSV file; name is used in errors.
// Columns are found by their header names, so files with columns added
// later still read.
func ReadCSV(r io.Reader, name string) ([]Point, error) {
	cr := csv.NewReader(r)
	records, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFormat, name, err)
	}
	if len(records) == 0 {
		return nil, fmt.Errorf("%w: %s is empty", ErrFormat, name)
	}
	col := map[string]int{}
	for i, h := range records[0] {
		col[h] = i
	}
	for _, c := range requiredColumns {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("%w: %s has no column %q", ErrFormat, name, c)
		}
	}
	var points []Point
	for line, rec := range records[1:] {
		p := Point{File: name, OtherCPUPercent: -1}
		var errs []error
		get := func(c string) string {
			if i, ok := col[c]; ok && i < len(rec) {
				return rec[i]
			}
			return ""
		}
		num := func(c string, required bool) float64 {
			s := get(c)
			if s == "" && !required {
				return 0
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				errs = append(errs, fmt.Errorf("column %s: %q", c, s))
			}
			return v
		}
		p.System, p.Workload, p.Machine = get("cluster"), get("workload"), get("machine")
		p.Concurrency = int(num("concurrency", true))
		p.Ops = int64(num("ops", true))
		p.Seconds = num("seconds", true)
		p.OpsPerSec = num("ops_per_second", true)
		p.P50Ms, p.P99Ms = num("p50_ms", true), num("p99_ms", true)
		p.ValueBytes, p.Keys = int(num("value_bytes", false)), int(num("keys", false))
		p.Errors, p.Retries = int64(num("errors", false)), int64(num("retries", false))
		if get("other_cpu_percent") != "" {
			p.OtherCPUPercent = num("other_cpu_percent", true)
		}
		if get("server_cpu_us_per_op") != "" {
			p.ServerCPUPerOpUs, p.HasServerCPU = num("server_cpu_us_per_op", true), true
		}
		if p.System == "" || p.Workload == "" {
			errs = append(errs, errors.New("empty cluster or workload"))
		}
		if len(errs) > 0 {
			return nil, fmt.Errorf("%w: %s line %d: %w", ErrFormat, name, line+2, errors.Join(errs...))
		}
		points = append(points, p)
	}
	return points, nil
}

// ReadFiles reads every file with ReadCSV, in the order given.
func ReadFiles(paths []string) ([]Point, error) {
	var all []Point
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		ps, err := ReadCSV(f, path)
		_ = f.Close()
		if err != nil {
			return nil, err
		}
		all = append(all, ps...)
	}
	return all, nil
}

// Row is one workload at one concurrency: system A's run and system B's.
// A or B is nil if that system did not run it.
type Row struct {
	Workload    string
	Concurrency int
	A, B        *Point
}

// Ratio is x / y, and false when either is missing (not ok) or y is 0:
// a ratio to nothing is not a figure.
func Ratio(x float64, xOK bool, y float64, yOK bool) (float64, bool) {
	if !xOK || !yOK || y == 0 {
		return 0, false
	}
	return x / y, true
}

// Metric is one of the compared quantities of a Point.
type Metric struct {
	Name string // as in table headers: "ops/s", "p50 ms"
	Key  string // as in CSV headers: "ops_per_second"
	// Value returns the point's figure and whether it has one.
	Value func(p *Point) (float64, bool)
	// Digits is the precision printed in tables.
	Digits int
}

// Metrics are the compared quantities, in table order.
var Metrics = []Metric{
	{Name: "ops/s", Key: "ops_per_second", Digits: 1, Value: func(p *Point) (float64, bool) { return p.OpsPerSec, p.Ops > 0 }},
	{Name: "p50 ms", Key: "p50_ms", Digits: 2, Value: func(p *Point) (float64, bool) { return p.P50Ms, p.Ops > 0 }},
	{Name: "p99 ms", Key: "p99_ms", Digits: 2, Value: func(p *Point) (float64, bool) { return p.P99Ms, p.Ops > 0 }},
	{Name: "server CPU µs/op", Key: "server_cpu_us_per_op", Digits: 0, Value: func(p *Point) (float64, bool) {
		return p.ServerCPUPerOpUs, p.HasServerCPU && p.Ops > 0
	}},
}

// Values returns the metric's figure for A and B and the ratio A / B,
// each with whether it exists.
func (r Row) Values(m Metric) (a float64, aOK bool, b float64, bOK bool, ratio float64, ratioOK bool) {
	if r.A != nil {
		a, aOK = m.Value(r.A)
	}
	if r.B != nil {
		b, bOK = m.Value(r.B)
	}
	ratio, ratioOK = Ratio(a, aOK, b, bOK)
	return
}

// Build pairs the points of systems a and b. Rows come in the order the
// workloads first appear in points, and by concurrency within a workload.
// Points of other systems are ignored. A system, workload and concurrency
// seen twice is an error.
func Build(points []Point, a, b string) ([]Row, error) {
	if a == b {
		return nil, fmt.Errorf("compare: systems %q and %q are the same", a, b)
	}
	type key struct {
		workload    string
		concurrency int
	}
	var workloads []string
	rows := map[key]*Row{}
	for i := range points {
		p := &points[i]
		if p.System != a && p.System != b {
			continue
		}
		k := key{p.Workload, p.Concurrency}
		r, ok := rows[k]
		if !ok {
			r = &Row{Workload: p.Workload, Concurrency: p.Concurrency}
			rows[k] = r
			if !slices.Contains(workloads, p.Workload) {
				workloads = append(workloads, p.Workload)
			}
		}
		slot := &r.A
		if p.System == b {
			slot = &r.B
		}
		if *slot != nil {
			return nil, fmt.Errorf("compare: %s %s at %d clients twice (%s and %s)", p.System, p.Workload, p.Concurrency, (*slot).File, p.File)
		}
		*slot = p
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("compare: no run of %q or %q", a, b)
	}
	out := make([]Row, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(x, y Row) int {
		if c := slices.Index(workloads, x.Workload) - slices.Index(workloads, y.Workload); c != 0 {
			return c
		}
		return x.Concurrency - y.Concurrency
	})
	return out, nil
}
