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
const PointTableLegend = `share: the point's fraction of distributed transactions (1: all, the thesis's workload); class: the row's
transactions, distributed (one object on each of 8 nodes) or local (8 objects of one node); round: repetition of the run's points;
txn/s: committed transactions of the class per second; mean, p99: latency of a committed transaction, retries included;
before/body/commit: the mean split at the committed attempt's body (begin and aborted attempts; the 8 reads, each followed by
its write; the commit);
aborted: attempts that aborted and were retried, per committed transaction; failed: transactions that gave up;
rpcs: client RPCs per committed transaction of the point (both classes; reads, prepare/commit, status, oracle, cleanup), counted
by the client's interceptor; msgs, steps: the commit protocol's messages and communication steps per committed transaction of the
point as the system counts them (2pc-locking: client.Stats, aborted attempts' included; hierarchy-*: the validators' own counts
per transaction decided, warm-up included; "-": the protocol counts none); formula: the thesis's 2.2-2.3 / 3.3-3.4 for the row's class
(distributed: 8 nodes, decider at level 1; local: 1 node); fenced s: about how long in the point (warm-up included) some
range's lease fence was up, its node refusing hierarchy parts (a lease lost and taken again); resent/forgot: the hierarchy
validators' votes resent after waiting 1 s (ResendAfter) for a decision, and transactions forgotten by inner validators, in
the point (warm-up included, both classes); delay ms: the one-way delay realized, asked / client RPCs / validator links (the mean
time an injected sleep took: a coarse timer makes it longer than asked; links warm-up included); cpu: cores the benchmark's process (nodes, validators, clients) kept busy in the
measured window (both classes).`

// WritePointTable prints the points.
func WritePointTable(w io.Writer, points []Point) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tclients\tshare\tclass\tround\ttxn/s\tmean ms\tp99 ms\tbefore/body/commit ms\taborted\tfailed\trpcs\tmsgs\tsteps\tformula steps/msgs\tfenced s\tresent/forgot\tdelay ms\tcpu\t")
	for _, p := range points {
		msgs, steps := "-", "-"
		if p.ProtocolMessagesPerTxn > 0 {
			msgs, steps = fmt.Sprintf("%.1f", p.ProtocolMessagesPerTxn), fmt.Sprintf("%.2f", p.ProtocolStepsPerTxn)
		}
		formula := "-"
		if s, ok := SystemByName(p.System); ok {
			n := UpdatesPerTxn
			if p.Class == ClassLocal {
				n = 1
			}
			if fs, fm, ok := Formula(s, n, 1); ok {
				formula = fmt.Sprintf("%.2f / %.2f", fs, fm)
			}
		}
		aborted := 0.0
		if p.Txns > 0 {
			aborted = float64(p.AbortedAttempts) / float64(p.Txns)
		}
		mean, p99 := fmt.Sprintf("%.1f", Ms(p.Mean)), fmt.Sprintf("%.1f", Ms(p.P99))
		split := fmt.Sprintf("%.1f/%.1f/%.1f", Ms(p.MeanBefore), Ms(p.MeanBody), Ms(p.MeanCommit))
		if p.Txns == 0 {
			mean, p99, split = "-", "-", "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%s\t%d\t%.1f\t%s\t%s\t%s\t%.3f\t%d\t%.1f\t%s\t%s\t%s\t%.1f\t%d/%d\t%s\t%.2f\t\n", p.System, p.Clients, p.Share, p.Class, p.Round,
			p.Throughput(), mean, p99, split, aborted, p.Failed, p.RPCsPerTxn, msgs, steps, formula, p.Fenced.Seconds(), p.Resent, p.Forgotten, p.delays(), p.CPU)
	}
	_ = tw.Flush()
}

// delays is the point's asked and realized one-way delays, in ms.
func (p Point) delays() string {
	return fmt.Sprintf("%.2f/%.2f/%.2f", p.OneWayMs, Ms(p.ClientDelay), Ms(p.LinkDelay))
}

// objectsName names how the point's clients chose objects.
func (p Point) objectsName() string {
	if p.Disjoint {
		return "disjoint"
	}
	return "uniform"
}

// Baseline is the system the others are compared with (the thesis's).
const Baseline = "2pc-locking"

// SystemRatio is one point's throughput against Baseline's at the same
// clients, share, class and round of one run.
type SystemRatio struct {
	At, Base Point
}

// Ratio is At's throughput over Base's (0 if Base committed none).
func (r SystemRatio) Ratio() float64 {
	if b := r.Base.Throughput(); b > 0 {
		return r.At.Throughput() / b
	}
	return 0
}

// SystemRatios pairs every point of a system other than Baseline with
// Baseline's point of the same clients, share, class and round.
func SystemRatios(points []Point) []SystemRatio {
	var out []SystemRatio
	for _, at := range points {
		if at.System == Baseline {
			continue
		}
		for _, base := range points {
			if base.System == Baseline && base.Clients == at.Clients && base.Share == at.Share && base.Class == at.Class && base.Round == at.Round {
				out = append(out, SystemRatio{At: at, Base: base})
				break
			}
		}
	}
	return out
}

// WriteSystemRatios prints SystemRatios.
func WriteSystemRatios(w io.Writer, rs []SystemRatio) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "system\tclients\tshare\tclass\tround\ttxn/s\t%s txn/s\tratio\t\n", Baseline)
	for _, r := range rs {
		ratio := "-" // the baseline committed nothing
		if r.Base.Throughput() > 0 {
			ratio = fmt.Sprintf("%.2fx", r.Ratio())
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%s\t%d\t%.1f\t%.1f\t%s\t\n", r.At.System, r.At.Clients, r.At.Share, r.At.Class, r.At.Round,
			r.At.Throughput(), r.Base.Throughput(), ratio)
	}
	_ = tw.Flush()
}

// ShareRatio compares local transactions' latency at a share of
// distributed transactions with that at share 0, for one system, client
// count and round of one run.
type ShareRatio struct {
	System  string
	Clients int
	Round   int
	Share   float64
	// Base and At are the local class's points at share 0 and at Share.
	Base, At Point
}

// P99Ratio is the local p99 at Share over that at share 0.
func (r ShareRatio) P99Ratio() float64 { return ratio(r.At.P99, r.Base.P99) }

// MeanRatio is the local mean at Share over that at share 0.
func (r ShareRatio) MeanRatio() float64 { return ratio(r.At.Mean, r.Base.Mean) }

func ratio(a, b time.Duration) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// ShareRatios pairs every local point at a share in (0, 1) with the local
// point of the same system, clients and round at share 0 (the issue's
// target: local transactions' p99 within 10% when 50% distributed ones are
// added), in the order of points; points without commits are left out.
func ShareRatios(points []Point) []ShareRatio {
	var out []ShareRatio
	for _, at := range points {
		if at.Class != ClassLocal || at.Share <= 0 || at.Txns == 0 {
			continue
		}
		for _, base := range points {
			if base.Class == ClassLocal && base.Share == 0 && base.Txns > 0 && base.System == at.System && base.Clients == at.Clients && base.Round == at.Round {
				out = append(out, ShareRatio{System: at.System, Clients: at.Clients, Round: at.Round, Share: at.Share, Base: base, At: at})
				break
			}
		}
	}
	return out
}

// WriteShareRatios prints ShareRatios, with whether each is within
// tolerance (0.10: the 10%).
func WriteShareRatios(w io.Writer, rs []ShareRatio, tolerance float64) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tclients\tround\tshare\tlocal p99 ms at 0\tat share\tp99 ratio\tlocal mean ms at 0\tat share\tmean ratio\tcpu at 0\tat share\tp99 within\t")
	for _, r := range rs {
		verdict := fmt.Sprintf("no (+%.0f%%)", (r.P99Ratio()-1)*100)
		if r.P99Ratio() <= 1+tolerance {
			verdict = fmt.Sprintf("yes (%+.0f%%)", (r.P99Ratio()-1)*100)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.1f\t%.1f\t%.3f\t%.1f\t%.1f\t%.3f\t%.2f\t%.2f\t%s\t\n", r.System, r.Clients, r.Round, r.Share,
			Ms(r.Base.P99), Ms(r.At.P99), r.P99Ratio(), Ms(r.Base.Mean), Ms(r.At.Mean), r.MeanRatio(), r.Base.CPU, r.At.CPU, verdict)
	}
	_ = tw.Flush()
}

var csvHeader = []string{"system", "batch", "clients", "distributed_share", "class", "round", "txns", "seconds", "txn_per_s", "mean_ms", "p99_ms",
	"aborted_attempts", "failed", "rpcs_per_txn", "protocol_messages_per_txn", "protocol_steps_per_txn", "one_way_delay_ms", "fenced_s", "resent", "forgotten", "objects", "think_ms", "cpu_cores", "client_delay_ms", "link_delay_ms", "mean_before_ms", "mean_body_ms", "mean_commit_ms", "p99_before_ms", "p99_body_ms", "p99_commit_ms", "machine"}

// WriteCSV writes the points, each row naming the machine.
func WriteCSV(path, machine string, points []Point) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(csvHeader)
	for _, p := range points {
		batch := 0
		if s, ok := SystemByName(p.System); ok {
			batch = s.Batch
		}
		_ = w.Write([]string{p.System, strconv.Itoa(batch), strconv.Itoa(p.Clients), fmt.Sprintf("%.3f", p.Share), p.Class, strconv.Itoa(p.Round),
			strconv.FormatInt(p.Txns, 10), fmt.Sprintf("%.3f", p.Seconds),
			fmt.Sprintf("%.2f", p.Throughput()), fmt.Sprintf("%.3f", Ms(p.Mean)), fmt.Sprintf("%.3f", Ms(p.P99)),
			strconv.FormatInt(p.AbortedAttempts, 10), strconv.FormatInt(p.Failed, 10), fmt.Sprintf("%.2f", p.RPCsPerTxn),
			fmt.Sprintf("%.2f", p.ProtocolMessagesPerTxn), fmt.Sprintf("%.3f", p.ProtocolStepsPerTxn), fmt.Sprintf("%.3f", p.OneWayMs), fmt.Sprintf("%.1f", p.Fenced.Seconds()),
			strconv.FormatInt(p.Resent, 10), strconv.FormatInt(p.Forgotten, 10), p.objectsName(), fmt.Sprintf("%.3f", Ms(p.Think)), fmt.Sprintf("%.3f", p.CPU), fmt.Sprintf("%.3f", Ms(p.ClientDelay)), fmt.Sprintf("%.3f", Ms(p.LinkDelay)),
			fmt.Sprintf("%.3f", Ms(p.MeanBefore)), fmt.Sprintf("%.3f", Ms(p.MeanBody)), fmt.Sprintf("%.3f", Ms(p.MeanCommit)),
			fmt.Sprintf("%.3f", Ms(p.P99Before)), fmt.Sprintf("%.3f", Ms(p.P99Body)), fmt.Sprintf("%.3f", Ms(p.P99Commit)), machine})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// Axis is what a plot's x axis is.
type Axis int

const (
	// AxisClients: against clients, a line per system (and share, class,
	// round where they vary): the thesis's figures 4.1/4.4 and 4.8/4.9.
	AxisClients Axis = iota
	// AxisBatch: against the hierarchy systems' batch size, a line per
	// protocol: the thesis's figure 4.7.
	AxisBatch
	// AxisShare: against the share of distributed transactions, a line per
	// system and class.
	AxisShare
)

// place places p on the axis: its x value and the name of its line
// (false: p has no place, e.g. a system without batches on AxisBatch).
func (a Axis) place(p Point, showShare, showRound bool) (x float64, series string, ok bool) {
	name := p.System
	switch a {
	case AxisBatch:
		s, found := SystemByName(p.System)
		if !found || s.Batch == 0 {
			return 0, "", false
		}
		x, name = float64(s.Batch), string(s.Protocol)
		if showShare {
			name += fmt.Sprintf(" share %.2g", p.Share)
		}
		name += " " + p.Class
	case AxisShare:
		x = 100 * p.Share // the plot labels whole numbers
		name += " " + p.Class
	default:
		x = float64(p.Clients)
		if showShare {
			name += fmt.Sprintf(" share %.2g %s", p.Share, p.Class)
		}
	}
	if showRound {
		name += fmt.Sprintf(" r%d", p.Round)
	}
	return x, name, true
}

func (a Axis) label() string {
	switch a {
	case AxisBatch:
		return "batch size"
	case AxisShare:
		return "distributed transactions, %"
	}
	return "clients"
}

// WritePlot draws throughput, mean and p99 latency against the axis, a
// line per system (and share, class and round where they vary).
func WritePlot(path, title, machine string, points []Point, axis Axis) error {
	shares, rounds := map[float64]bool{}, map[int]bool{}
	for _, p := range points {
		shares[p.Share] = true
		rounds[p.Round] = true
	}
	showShare, showRound := len(shares) > 1 || !shares[1], len(rounds) > 1
	mk := func(latency bool, y func(Point) float64) []plot.Series {
		idx := map[string]int{}
		var out []plot.Series
		for _, p := range points {
			x, n, ok := axis.place(p, showShare, showRound)
			if !ok || (latency && p.Txns == 0) {
				continue
			}
			i, seen := idx[n]
			if !seen {
				i = len(out)
				idx[n] = i
				out = append(out, plot.Series{Name: n})
			}
			out[i].X = append(out[i].X, x)
			out[i].Y = append(out[i].Y, y(p))
		}
		return out
	}
	l := axis.label()
	img := plot.Grid(title, machine, 2, 620, 400,
		plot.LineChart{Title: "throughput", XLabel: l, YLabel: "committed txn/s", Series: mk(false, Point.Throughput)},
		plot.LineChart{Title: "latency (mean)", XLabel: l, YLabel: "ms", Series: mk(true, func(p Point) float64 { return Ms(p.Mean) })},
		plot.LineChart{Title: "latency (p99)", XLabel: l, YLabel: "ms", Series: mk(true, func(p Point) float64 { return Ms(p.P99) })},
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
