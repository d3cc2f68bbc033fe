package pipelinebench

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/canopy-db/canopy/internal/bench/plot"
)

// FitLine is the least-squares line through (xs[i], ys[i]): the slope and
// the intercept. It needs at least two points with distinct x.
func FitLine(xs, ys []float64) (slope, intercept float64, err error) {
	if len(xs) != len(ys) {
		return 0, 0, fmt.Errorf("pipelinebench: fit of %d x values against %d y values", len(xs), len(ys))
	}
	n := float64(len(xs))
	var sx, sy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
	}
	mx, my := sx/n, sy/n
	var sxx, sxy float64
	for i := range xs {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	if len(xs) < 2 || sxx == 0 {
		return 0, 0, errors.New("pipelinebench: a fit needs two points with distinct x")
	}
	slope = sxy / sxx
	return slope, my - slope*mx, nil
}

// Reference is what the post and the model say for one mode.
type Reference struct {
	// RTTSlopePost is the post's slope of New-Order latency per ms of round
	// trip ("" where the post has none); RTTSlopeModel the latency model's
	// (W + 1 = 6 rounds without pipelining, 2 with it, 1 with parallel
	// commits).
	RTTSlopePost  string
	RTTSlopeModel float64
	// WriteCostPost is the post's cost of one more write.
	WriteCostPost string
}

// References by mode name.
var References = map[string]Reference{
	"off":       {RTTSlopePost: "6", RTTSlopeModel: 6, WriteCostPost: "one RTT (linear)"},
	"pipelined": {RTTSlopePost: "2", RTTSlopeModel: 2, WriteCostPost: "a little under 0.5 ms"},
	"parallel":  {RTTSlopePost: "(not measured)", RTTSlopeModel: 1, WriteCostPost: "(not measured)"},
}

// Fit is one mode's line.
type Fit struct {
	Mode string
	// SlopeMean and SlopeP50 are fitted to the mean and to the median
	// latency (ms per unit of x); InterceptMean in ms.
	SlopeMean, SlopeP50, InterceptMean float64
	Points                             int
	// Rounds, ReadIndex and OracleReadIndex are the counted rounds per
	// transaction (Point.ConsensusRounds, ReadIndexRounds and
	// OracleReadIndexRounds), averaged over the points.
	Rounds, ReadIndex, OracleReadIndex float64
}

// FitModes fits each mode's points, latency against x(p), in the order
// of Modes.
func FitModes(points []Point, x func(Point) float64) ([]Fit, error) {
	var out []Fit
	for _, m := range Modes {
		var xs, means, p50s []float64
		var rounds, ri, ori float64
		for _, p := range points {
			if p.Mode == m.Name {
				xs = append(xs, x(p))
				means = append(means, Ms(p.Mean))
				p50s = append(p50s, Ms(p.P50))
				rounds += p.ConsensusRounds
				ri += p.ReadIndexRounds
				ori += p.OracleReadIndexRounds
			}
		}
		if len(xs) == 0 {
			continue
		}
		sm, im, err := FitLine(xs, means)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Name, err)
		}
		sp, _, err := FitLine(xs, p50s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Name, err)
		}
		n := float64(len(xs))
		out = append(out, Fit{Mode: m.Name, SlopeMean: sm, SlopeP50: sp, InterceptMean: im, Points: len(xs),
			Rounds: rounds / n, ReadIndex: ri / n, OracleReadIndex: ori / n})
	}
	return out, nil
}

// RTTX and WritesX are the x of the two experiments.
func RTTX(p Point) float64    { return p.RTTMs }
func WritesX(p Point) float64 { return float64(p.Writes) }

// WritePointTable prints one row per point.
func WritePointTable(w io.Writer, points []Point) {
	fmt.Fprintf(w, "%7s %8s %6s %-9s %5s %6s %9s %9s %9s %8s %8s %8s %8s %8s %7s %7s %8s %8s %8s %8s\n",
		"rtt ms", "rtt real", "writes", "mode", "txns", "failed", "p50 ms", "mean ms", "p99 ms",
		"rounds", "ri rnds", "ora ri", "ora ent", "cons.bat", "path", "remote", "ts RPC", "all RPC", "raft ent", "cpu ms")
	for _, p := range points {
		rounds := fmt.Sprintf("%.2f", p.ConsensusRounds)
		if p.ConsensusRoundsMin != p.ConsensusRoundsMax {
			rounds = fmt.Sprintf("%.2f*", p.ConsensusRounds)
		}
		fmt.Fprintf(w, "%7g %8.2f %6d %-9s %5d %6d %9.2f %9.2f %9.2f %8s %8.2f %8.2f %8.2f %8.2f %7.2f %7.2f %8.2f %8.2f %8.2f %8.2f\n",
			p.RTTMs, Ms(p.RealRTT), p.Writes, p.Mode, p.Txns, p.Failed, Ms(p.P50), Ms(p.Mean), Ms(p.P99),
			rounds, p.ReadIndexRounds, p.OracleReadIndexRounds, p.OracleEntries, p.ConsensusBatches,
			p.PathBatchRPCs, p.PathRemoteRPCs, p.TimestampRPCs, p.AllRPCs, p.RaftEntries, Ms(p.CPU))
	}
}

// PointTableLegend explains the columns of WritePointTable.
const PointTableLegend = `rtt real: the round trip the Raft links realized (twice the mean time a delayed batch was held;
           Go's timers make it longer than asked); then, per committed transaction (means over the point):
  rounds   consensus rounds on its critical path, counted by the client (client.RoundCounter:
           synchronous writes, proofs, status and STAGING writes; parallel ones once;
           * = not the same for every transaction of the point)
  ri rnds  ReadIndex rounds the leaseholders ran for waiting reads whose lease had lapsed
           (a quorum round trip, no log entry; counted by the replicas)
  ora ri   the same on the oracle's range: a timestamp confirming the oracle's leadership
  ora ent  Raft entries on the oracle's range (persisting its bound)
  cons.bat batches that waited for consensus (parallel ones each)
  path     Batch RPCs sent with the transaction's context; remote = its RPCs to another node
  ts RPC   oracle Timestamps RPCs (begin and commit)
  all RPC  every RPC of the client, background intent resolution included
  raft ent Raft entries committed over all ranges, background work included
  cpu ms   CPU time of this process (client and all three nodes) per transaction`

// WriteRTTSummary prints each mode's slope of latency per ms of round
// trip beside the post's and the model's.
func WriteRTTSummary(w io.Writer, fits []Fit) {
	fmt.Fprintf(w, "%-9s %7s %14s %13s %13s %15s %6s %8s %8s %8s\n", "mode", "points", "slope (mean)", "slope (p50)", "intercept ms", "post", "model",
		"rounds", "ri rnds", "ora ri")
	for _, f := range fits {
		r := References[f.Mode]
		fmt.Fprintf(w, "%-9s %7d %14.2f %13.2f %13.2f %15s %6g %8.2f %8.2f %8.2f\n", f.Mode, f.Points, f.SlopeMean, f.SlopeP50, f.InterceptMean,
			r.RTTSlopePost, r.RTTSlopeModel, f.Rounds, f.ReadIndex, f.OracleReadIndex)
	}
	fmt.Fprintln(w, "(rounds, ri rnds, ora ri: the counted rounds per transaction of the point table, averaged over the points)")
	for _, f := range fits {
		if f.Mode != "parallel" {
			continue
		}
		const target = 1.5
		if f.SlopeMean <= target {
			fmt.Fprintf(w, "target (issue 8): slope <= %.1f with pipelining and parallel commits: met (%.2f)\n", target, f.SlopeMean)
		} else {
			fmt.Fprintf(w, "target (issue 8): slope <= %.1f with pipelining and parallel commits: MISSED by %.2f (%.2f)\n", target, f.SlopeMean-target, f.SlopeMean)
		}
	}
}

// WriteWritesSummary prints each mode's cost of one more write (the slope
// of latency against writes) beside the post's.
func WriteWritesSummary(w io.Writer, fits []Fit) {
	fmt.Fprintf(w, "%-9s %7s %22s %21s %13s %24s\n", "mode", "points", "ms/write (mean fit)", "ms/write (p50 fit)", "intercept ms", "post")
	for _, f := range fits {
		fmt.Fprintf(w, "%-9s %7d %22.3f %21.3f %13.2f %24s\n", f.Mode, f.Points, f.SlopeMean, f.SlopeP50, f.InterceptMean, References[f.Mode].WriteCostPost)
	}
	for _, f := range fits {
		if f.Mode != "parallel" {
			continue
		}
		const target = 0.3
		if f.SlopeMean < target {
			fmt.Fprintf(w, "target (issue 8): < %.1f ms per extra write with pipelining and parallel commits: met (%.3f)\n", target, f.SlopeMean)
		} else {
			fmt.Fprintf(w, "target (issue 8): < %.1f ms per extra write with pipelining and parallel commits: MISSED by %.3f ms (%.3f)\n", target, f.SlopeMean-target, f.SlopeMean)
		}
	}
}

// csvHeader names the columns of WriteCSV.
var csvHeader = []string{"experiment", "mode", "rtt_ms", "reads", "writes", "txns", "failed", "retries", "elapsed_s",
	"mean_ms", "p50_ms", "p99_ms", "max_ms", "consensus_rounds", "consensus_rounds_min", "consensus_rounds_max",
	"consensus_batches", "path_batch_rpcs", "path_remote_rpcs", "timestamp_rpcs", "all_rpcs", "raft_entries",
	"oracle_raft_entries", "read_index_rounds", "oracle_read_index_rounds", "cpu_ms", "rtt_real_ms", "machine"}

// WriteCSV writes the points of one experiment to path.
func WriteCSV(path, experiment, machine string, points []Point) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(csvHeader)
	ff := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	for _, p := range points {
		_ = w.Write([]string{experiment, p.Mode, ff(p.RTTMs), strconv.Itoa(p.Reads), strconv.Itoa(p.Writes),
			strconv.FormatInt(p.Txns, 10), strconv.FormatInt(p.Failed, 10), strconv.FormatInt(p.Retries, 10), ff(p.Elapsed.Seconds()),
			ff(Ms(p.Mean)), ff(Ms(p.P50)), ff(Ms(p.P99)), ff(Ms(p.Max)), ff(p.ConsensusRounds),
			strconv.FormatInt(p.ConsensusRoundsMin, 10), strconv.FormatInt(p.ConsensusRoundsMax, 10),
			ff(p.ConsensusBatches), ff(p.PathBatchRPCs), ff(p.PathRemoteRPCs), ff(p.TimestampRPCs), ff(p.AllRPCs),
			ff(p.RaftEntries), ff(p.OracleEntries), ff(p.ReadIndexRounds), ff(p.OracleReadIndexRounds), ff(Ms(p.CPU)), ff(Ms(p.RealRTT)), machine})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// series is one line per mode of y(p) against x(p).
func series(points []Point, x, y func(Point) float64) []plot.Series {
	var out []plot.Series
	for i, m := range Modes {
		s := plot.Series{Name: m.Name, Color: plot.Palette[i]}
		for _, p := range points {
			if p.Mode == m.Name {
				s.X = append(s.X, x(p))
				s.Y = append(s.Y, y(p))
			}
		}
		if len(s.X) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// modelSeries draws, dashed, each mode's model line from its measured
// latency at the smallest round trip: that latency + model slope x the
// round trip above it.
func modelSeries(points []Point) []plot.Series {
	var out []plot.Series
	for i, m := range Modes {
		var mine []Point
		for _, p := range points {
			if p.Mode == m.Name {
				mine = append(mine, p)
			}
		}
		if len(mine) == 0 {
			continue
		}
		base := mine[0]
		for _, p := range mine {
			if p.RTTMs < base.RTTMs {
				base = p
			}
		}
		k := References[m.Name].RTTSlopeModel
		s := plot.Series{Name: fmt.Sprintf("model %g x RTT", k), Color: plot.Palette[i], Dashed: true}
		for _, p := range mine {
			s.X = append(s.X, p.RTTMs)
			s.Y = append(s.Y, Ms(base.Mean)+k*(p.RTTMs-base.RTTMs))
		}
		out = append(out, s)
	}
	return out
}

// allRounds draws, dashed, the rounds counted by the client plus the
// ReadIndex rounds counted by the replicas (the oracle's included).
func allRounds(points []Point, x func(Point) float64) []plot.Series {
	out := series(points, x, func(p Point) float64 { return p.ConsensusRounds + p.ReadIndexRounds + p.OracleReadIndexRounds })
	for i := range out {
		out[i].Name += " + ReadIndex"
		out[i].Dashed = true
	}
	return out
}

func meanMs(p Point) float64 { return Ms(p.Mean) }
func rounds(p Point) float64 { return p.ConsensusRounds }

// WriteRTTPlot draws experiment 1: mean latency against round trip (with
// the model's lines dashed) and the rounds counted.
func WriteRTTPlot(path, machine string, points []Point) error {
	img := plot.Grid("canopy bench pipeline: New-Order-like transaction (4 reads, 5 writes) vs inter-node RTT", machine, 2, 620, 400,
		plot.LineChart{Title: "latency (mean); dashed: model", XLabel: "round trip (ms)", YLabel: "ms",
			Series: append(series(points, RTTX, meanMs), modelSeries(points)...)},
		plot.LineChart{Title: "rounds per transaction (counted); dashed: + ReadIndex", XLabel: "round trip (ms)", YLabel: "rounds",
			Series: append(series(points, RTTX, rounds), allRounds(points, RTTX)...)},
	)
	return plot.WritePNG(path, img)
}

// WriteWritesPlot draws experiment 2: latency against writes, on a linear
// and on a log10 scale (the plot package draws linear y axes only, so the
// second panel plots log10 of the latency), and the rounds counted.
func WriteWritesPlot(path, machine string, rttMs float64, points []Point) error {
	log10ms := func(p Point) float64 { return math.Log10(Ms(p.Mean)) }
	img := plot.Grid(fmt.Sprintf("canopy bench pipeline: writes per transaction vs latency at %g ms RTT", rttMs), machine, 3, 460, 400,
		plot.LineChart{Title: "latency (mean)", XLabel: "writes", YLabel: "ms", LogX: true, Series: series(points, WritesX, meanMs)},
		plot.LineChart{Title: "latency (mean), log scale", XLabel: "writes", YLabel: "log10(ms)", LogX: true, Series: series(points, WritesX, log10ms)},
		plot.LineChart{Title: "rounds (counted); dashed: + ReadIndex", XLabel: "writes", YLabel: "rounds", LogX: true,
			Series: append(series(points, WritesX, rounds), allRounds(points, WritesX)...)},
	)
	return plot.WritePNG(path, img)
}

// ReadCSV reads the points WriteCSV wrote, and the machine column of the
// first row (for the plots redrawn from them).
func ReadCSV(path string) (points []Point, machine string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, "", fmt.Errorf("pipelinebench: %s: %w", path, err)
	}
	if len(rows) == 0 || (len(rows[0]) != len(csvHeader) && len(rows[0]) != len(csvHeader)-1) {
		return nil, "", fmt.Errorf("pipelinebench: %s: not a bench pipeline CSV (header %v)", path, rows[:min(len(rows), 1)])
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, r := range rows[1:] {
		var perr error
		fl := func(name string) float64 {
			v, err := strconv.ParseFloat(r[col[name]], 64)
			if err != nil && perr == nil {
				perr = fmt.Errorf("column %s: %w", name, err)
			}
			return v
		}
		in := func(name string) int64 { return int64(fl(name)) }
		dur := func(name string) time.Duration { return time.Duration(fl(name) * float64(time.Millisecond)) }
		p := Point{
			Mode: r[col["mode"]], RTTMs: fl("rtt_ms"), Reads: int(in("reads")), Writes: int(in("writes")),
			Txns: in("txns"), Failed: in("failed"), Retries: in("retries"),
			Elapsed: time.Duration(fl("elapsed_s") * float64(time.Second)),
			Mean:    dur("mean_ms"), P50: dur("p50_ms"), P99: dur("p99_ms"), Max: dur("max_ms"),
			ConsensusRounds: fl("consensus_rounds"), ConsensusRoundsMin: in("consensus_rounds_min"), ConsensusRoundsMax: in("consensus_rounds_max"),
			ConsensusBatches: fl("consensus_batches"), PathBatchRPCs: fl("path_batch_rpcs"), PathRemoteRPCs: fl("path_remote_rpcs"),
			TimestampRPCs: fl("timestamp_rpcs"), AllRPCs: fl("all_rpcs"), RaftEntries: fl("raft_entries"),
			OracleEntries: fl("oracle_raft_entries"), ReadIndexRounds: fl("read_index_rounds"), OracleReadIndexRounds: fl("oracle_read_index_rounds"),
		}
		if i, ok := col["cpu_ms"]; ok { // absent from CSVs written before the column
			v, err := strconv.ParseFloat(r[i], 64)
			if err != nil {
				return nil, "", fmt.Errorf("pipelinebench: %s: column cpu_ms: %w", path, err)
			}
			p.CPU = time.Duration(v * float64(time.Millisecond))
		}
		if i, ok := col["rtt_real_ms"]; ok { // absent from CSVs written before the column
			v, err := strconv.ParseFloat(r[i], 64)
			if err != nil {
				return nil, "", fmt.Errorf("pipelinebench: %s: column rtt_real_ms: %w", path, err)
			}
			p.RealRTT = time.Duration(v * float64(time.Millisecond))
		}
		if perr != nil {
			return nil, "", fmt.Errorf("pipelinebench: %s: %w", path, perr)
		}
		points = append(points, p)
		machine = r[col["machine"]]
	}
	return points, machine, nil
}
