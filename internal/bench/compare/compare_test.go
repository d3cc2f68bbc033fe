package compare

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/bench"
	"github.com/canopy-db/canopy/internal/bench/kvbench"
	"github.com/canopy-db/canopy/internal/bench/latency"
)

// run is a kvbench row as bench kv or txn would write it.
func run(system, workload string, conc int, ops int64, p50, p99 time.Duration, serverCPU time.Duration) kvbench.Row {
	r := kvbench.Row{Cluster: system, ValueBytes: 256, Keys: 10000, Result: kvbench.Result{
		Workload: workload, ReadPercent: -1, Concurrency: conc, Ops: ops, Writes: ops,
		Elapsed: 2 * time.Second, All: latency.Snapshot{Count: ops, P50: p50, P99: p99, Max: p99},
		OtherCPU: 100 * time.Millisecond,
	}}
	if serverCPU >= 0 {
		r.ServerPIDs, r.ServerCPU = 3, serverCPU
	}
	return r
}

// writeRuns writes each row to its own CSV file, as the script does, and
// returns the paths.
func writeRuns(t *testing.T, rows ...kvbench.Row) []string {
	t.Helper()
	dir := t.TempDir()
	m := bench.Machine{CPUs: 2, Kernel: "Linux test", Go: "go1.26", Date: time.Date(2026, 11, 23, 4, 0, 0, 0, time.UTC)}
	var paths []string
	for i, r := range rows {
		p := filepath.Join(dir, strings.ReplaceAll(r.Cluster+"-"+r.Workload, " ", "_")+"-"+string(rune('a'+i))+".csv")
		if err := kvbench.WriteCSV(p, []kvbench.Row{r}, m); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

func TestReadBuildRatios(t *testing.T) {
	ms := time.Millisecond
	paths := writeRuns(t,
		run("etcd", "put", 16, 2000, 4*ms, 10*ms, 1*time.Second),   // 1000 ops/s, 500 µs/op
		run("canopy", "put", 16, 1000, 8*ms, 30*ms, 2*time.Second), // 500 ops/s, 2000 µs/op
		run("etcd", "put", 1, 400, 1*ms, 2*ms, 200*time.Millisecond),
		run("canopy", "put", 1, 200, 2*ms, 5*ms, -1),            // server CPU not measured
		run("canopy", "txn", 1, 100, 20*ms, 50*ms, time.Second), // no etcd run
		run("fsync", "put", 1, 5, ms, ms, -1),                   // another system: ignored
	)
	points, err := ReadFiles(paths)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 6 || points[0].System != "etcd" || points[0].ServerCPUPerOpUs != 500 || !points[0].HasServerCPU || points[3].HasServerCPU {
		t.Fatalf("points %+v", points)
	}
	rows, err := Build(points, "canopy", "etcd")
	if err != nil {
		t.Fatal(err)
	}
	// put before txn (first appearance), then by clients.
	if len(rows) != 3 || rows[0].Workload != "put" || rows[0].Concurrency != 1 || rows[1].Concurrency != 16 || rows[2].Workload != "txn" {
		t.Fatalf("rows %+v", rows)
	}
	for _, c := range []struct {
		row    int
		metric int
		want   float64
		ok     bool
	}{
		{1, 0, 0.5, true}, // ops/s 500 / 1000
		{1, 1, 2, true},   // p50 8 / 4
		{1, 2, 3, true},   // p99 30 / 10
		{1, 3, 4, true},   // CPU 2000 / 500 µs/op
		{0, 3, 0, false},  // canopy's CPU not measured
		{2, 0, 0, false},  // no etcd txn
	} {
		_, _, _, _, got, ok := rows[c.row].Values(Metrics[c.metric])
		if ok != c.ok || (ok && (got < c.want-1e-9 || got > c.want+1e-9)) {
			t.Errorf("row %d %s: ratio %v, %v; want %v, %v", c.row, Metrics[c.metric].Name, got, ok, c.want, c.ok)
		}
	}

	rep := Report{Title: "Canopy against etcd", A: "canopy", B: "etcd", Notes: []string{"etcd 3.4.23"}, Rows: rows}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| put | 16 | 500.0 | 1000.0 | 0.50 | 8.00 | 4.00 | 2.00 | 30.00 | 10.00 | 3.00 | 2000 | 500 | 4.00 | 0 | 0 | 0 / 0 | 5 / 5 |",
		"| put | 1 | 100.0 | 200.0 | 0.50 | 2.00 | 1.00 | 2.00 | 5.00 | 2.00 | 2.50 | – | 500 | – |",
		"| txn | 1 | 50.0 | – | – |",
		"- etcd 3.4.23",
		"Machine, first run: 2 CPUs (nproc), Linux test",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	dir := t.TempDir()
	if err := WriteCSV(filepath.Join(dir, "c.csv"), rep); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "c.csv"))
	if !strings.Contains(string(b), "put,16,500.000,1000.000,0.5000,") {
		t.Errorf("CSV:\n%s", b)
	}
	if err := WritePlot(filepath.Join(dir, "c.png"), rep); err != nil {
		t.Fatal(err)
	}
}

func TestBuildRejectsDuplicatesAndNothing(t *testing.T) {
	ms := time.Millisecond
	points, err := ReadFiles(writeRuns(t, run("etcd", "get", 4, 10, ms, ms, -1), run("etcd", "get", 4, 11, ms, ms, -1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(points, "canopy", "etcd"); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate accepted: %v", err)
	}
	if _, err := Build(points, "a", "b"); err == nil {
		t.Error("no matching system accepted")
	}
	if _, err := Build(points, "etcd", "etcd"); err == nil {
		t.Error("one system against itself accepted")
	}
}

func TestReadCSVRejectsOtherFiles(t *testing.T) {
	for _, in := range []string{
		"",
		"a,b\n1,2\n",
		"workload,cluster,concurrency,ops,seconds,ops_per_second,p50_ms,p99_ms\nput,etcd,x,1,1,1,1,1\n",
		"workload,cluster,concurrency,ops,seconds,ops_per_second,p50_ms,p99_ms\nput,,1,1,1,1,1,1\n",
	} {
		if _, err := ReadCSV(strings.NewReader(in), "x.csv"); !errors.Is(err, ErrFormat) {
			t.Errorf("ReadCSV(%q) = %v, want ErrFormat", in, err)
		}
	}
}

func TestRatio(t *testing.T) {
	if r, ok := Ratio(3, true, 2, true); !ok || r != 1.5 {
		t.Errorf("3/2 = %v, %v", r, ok)
	}
	for _, c := range [][4]any{{1.0, true, 0.0, true}, {1.0, false, 1.0, true}, {1.0, true, 1.0, false}} {
		if _, ok := Ratio(c[0].(float64), c[1].(bool), c[2].(float64), c[3].(bool)); ok {
			t.Errorf("Ratio%v ok", c)
		}
	}
}
