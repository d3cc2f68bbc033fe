package hierbench

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench/plot"
)

// Formula returns the thesis's communication steps and messages of one
// distributed transaction on n nodes (formulas 2.2-2.3 for 2PC, 3.3-3.4
// for the hierarchy with the decider at level h and batch b), and false
// for a system the thesis has no formula for.
func Formula(s System, n, h int) (steps, messages float64, ok bool) {
	switch s.Protocol {
	case client.Protocol2PCLocking:
		if n == 1 {
			return 2, 2, true
		}
		return 4, 4 * float64(n), true
	case client.ProtocolHierarchyLocking, client.ProtocolHierarchyTimestamps:
		if n == 1 {
			return 2, 2, true
		}
		b := float64(max(s.Batch, 1))
		return 2 + float64(h)/b, float64(n) + (float64(h*n)+float64(n))/b + 1, true
	}
	return 0, 0, false
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// PointTableLegend explains WritePointTable's columns.
const PointTableLegend = `txn/s: committed transactions per second; mean, p99: latency of a committed transaction, retries included;
aborted: attempts that aborted and were retried, per committed transaction; failed: transactions that gave up;
rpcs: client RPCs per committed transaction (reads, prepare/commit, status, oracle, cleanup), counted by the client's interceptor;
msgs, steps: the commit protocol's messages and communication steps per committed transaction as the system counts them
(2pc-locking: client.Stats, aborted attempts' included; hierarchy-*: the validators' own counts per transaction decided,
warm-up included; "-": the protocol counts none); formula: the thesis's 2.2-2.3 / 3.3-3.4 for 8 nodes, decider at level 1.`

// WritePointTable prints the points.
func WritePointTable(w io.Writer, points []Point) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tclients\ttxn/s\tmean ms\tp99 ms\taborted\tfailed\trpcs\tmsgs\tsteps\tformula steps/msgs\t")
	for _, p := range points {
		msgs, steps := "-", "-"
		if p.ProtocolMessagesPerTxn > 0 {
			msgs, steps = fmt.Sprintf("%.1f", p.ProtocolMessagesPerTxn), fmt.Sprintf("%.2f", p.ProtocolStepsPerTxn)
		}
		formula := "-"
		if s, ok := SystemByName(p.System); ok {
			if fs, fm, ok := Formula(s, UpdatesPerTxn, 1); ok {
				formula = fmt.Sprintf("%.2f / %.2f", fs, fm)
			}
		}
		aborted := 0.0
		if p.Txns > 0 {
			aborted = float64(p.AbortedAttempts) / float64(p.Txns)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.3f\t%d\t%.1f\t%s\t%s\t%s\t\n", p.System, p.Clients, p.Throughput(),
			Ms(p.Mean), Ms(p.P99), aborted, p.Failed, p.RPCsPerTxn, msgs, steps, formula)
	}
	_ = tw.Flush()
}

var csvHeader = []string{"system", "clients", "txns", "seconds", "txn_per_s", "mean_ms", "p99_ms", "aborted_attempts", "failed",
	"rpcs_per_txn", "protocol_messages_per_txn", "protocol_steps_per_txn", "one_way_delay_ms", "machine"}

// WriteCSV writes the points, each row naming the machine.
func WriteCSV(path, machine string, points []Point) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(csvHeader)
	for _, p := range points {
		_ = w.Write([]string{p.System, strconv.Itoa(p.Clients), strconv.FormatInt(p.Txns, 10), fmt.Sprintf("%.3f", p.Seconds),
			fmt.Sprintf("%.2f", p.Throughput()), fmt.Sprintf("%.3f", Ms(p.Mean)), fmt.Sprintf("%.3f", Ms(p.P99)),
			strconv.FormatInt(p.AbortedAttempts, 10), strconv.FormatInt(p.Failed, 10), fmt.Sprintf("%.2f", p.RPCsPerTxn),
			fmt.Sprintf("%.2f", p.ProtocolMessagesPerTxn), fmt.Sprintf("%.3f", p.ProtocolStepsPerTxn), fmt.Sprintf("%.3f", p.OneWayMs), machine})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// WritePlot draws throughput and mean latency against clients, a line per
// system (the thesis's figures 4.1/4.4 and 4.8/4.9).
func WritePlot(path, title, machine string, points []Point) error {
	var names []string
	seen := map[string]bool{}
	for _, p := range points {
		if !seen[p.System] {
			seen[p.System] = true
			names = append(names, p.System)
		}
	}
	mk := func(y func(Point) float64) []plot.Series {
		var out []plot.Series
		for _, n := range names {
			s := plot.Series{Name: n}
			for _, p := range points {
				if p.System == n {
					s.X = append(s.X, float64(p.Clients))
					s.Y = append(s.Y, y(p))
				}
			}
			out = append(out, s)
		}
		return out
	}
	img := plot.Grid(title, machine, 2, 620, 400,
		plot.LineChart{Title: "throughput", XLabel: "clients", YLabel: "committed txn/s", Series: mk(Point.Throughput)},
		plot.LineChart{Title: "latency (mean)", XLabel: "clients", YLabel: "ms", Series: mk(func(p Point) float64 { return Ms(p.Mean) })},
	)
	return plot.WritePNG(path, img)
}

// Names returns the names of the systems, built or not.
func Names() string {
	var out []string
	for _, s := range Systems() {
		n := s.Name
		if !s.Built {
			n += " (not built)"
		}
		out = append(out, n)
	}
	return strings.Join(out, ", ")
}
