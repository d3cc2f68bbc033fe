package statusbench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/testcluster"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// ClusterOptions are shared by the experiments that start a cluster.
type ClusterOptions struct {
	// ReadyMax bounds a cluster's start-up. Default 2 minutes.
	ReadyMax time.Duration
	// Logger of the nodes; default errors only, to stderr.
	Logger *slog.Logger
}

func startCluster(o ClusterOptions, encoding string) (*testcluster.Cluster, error) {
	if o.ReadyMax == 0 {
		o.ReadyMax = 2 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	return testcluster.Start(testcluster.Options{Nodes: 3, StatusEncoding: encoding, TickInterval: 100 * time.Millisecond,
		ReadyTimeout: o.ReadyMax, Logger: o.Logger})
}

// ---- Hot spots ----

// HotSpotOptions configure the hot-spot experiment.
type HotSpotOptions struct {
	ClusterOptions
	Encodings   []string      // default v1, tickets
	Ranges      []int         // status ranges, ascending powers of two; default 4, 8, 16
	Commits     int           // consecutive commits per run; default 2,000
	Concurrency int           // committing workers; default 16
	RunMax      time.Duration // bound on one run; default 2 minutes
}

// HotSpotRange is one status range's share of a run.
type HotSpotRange struct {
	Encoding    string
	Ranges      int
	Index       int    // 0-based, in key order
	StartKey    []byte // first key (with keys.StatusPrefix)
	Leaseholder uint64 // node ID at the end of the run
	Records     int
}

// HotSpotRun is one run: an encoding at a number of status ranges.
type HotSpotRun struct {
	Encoding string
	Ranges   int
	Records  int // status records of the run (its commits and aborts)
	PerRange []HotSpotRange
	PerNode  map[uint64]int
	Elapsed  time.Duration
}

// Hottest returns the largest share of one range divided by the fair share
// (1/ranges).
func (r HotSpotRun) Hottest() float64 {
	best := 0
	for _, x := range r.PerRange {
		best = max(best, x.Records)
	}
	if r.Records == 0 {
		return 0
	}
	return float64(best) / float64(r.Records) * float64(r.Ranges)
}

func (o *HotSpotOptions) ensureDefaults() {
	if len(o.Encodings) == 0 {
		o.Encodings = []string{"v1", "tickets", "tickets-mix"}
	}
	if len(o.Ranges) == 0 {
		o.Ranges = []int{4, 8, 16}
	}
	if o.Commits == 0 {
		o.Commits = 2000
	}
	if o.Concurrency == 0 {
		o.Concurrency = 16
	}
	if o.RunMax == 0 {
		o.RunMax = 2 * time.Minute
	}
}

// HotSpots starts a 3-node cluster per encoding; for each number of
// status ranges (the table split further each time), runs Commits
// two-key transactions (no one-phase commit, so each writes a status
// record) and counts the run's status records per status range (scanned
// by start timestamp) and per leaseholder node.
func HotSpots(ctx context.Context, o HotSpotOptions, progress func(string)) ([]HotSpotRun, error) {
	o.ensureDefaults()
	var out []HotSpotRun
	for _, encName := range o.Encodings {
		runs, err := hotSpotsOne(ctx, o, encName, progress)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", encName, err)
		}
		out = append(out, runs...)
	}
	return out, nil
}

func hotSpotsOne(ctx context.Context, o HotSpotOptions, encName string, progress func(string)) ([]HotSpotRun, error) {
	enc, err := Encoding(encName)
	if err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("hot spots: starting a 3-node cluster, status encoding %s...", encName))
	c, err := startCluster(o.ClusterOptions, encName)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	db, err := client.Open(ctx, c.Addrs(), client.WithOptions(client.Options{OnePC: client.ToggleOff}))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var out []HotSpotRun
	for _, n := range o.Ranges {
		if err := db.SplitStatusTable(ctx, n); err != nil {
			return nil, fmt.Errorf("splitting the status table into %d: %w", n, err)
		}
		progress(fmt.Sprintf("hot spots: %s, %d status ranges, %d commits...", encName, n, o.Commits))
		run, err := hotSpotRun(ctx, o, db, enc, n)
		if err != nil {
			return nil, fmt.Errorf("%d ranges: %w", n, err)
		}
		out = append(out, run)
	}
	return out, nil
}

func hotSpotRun(ctx context.Context, o HotSpotOptions, db *client.DB, enc txnstatus.Encoding, n int) (HotSpotRun, error) {
	run := HotSpotRun{Encoding: enc.Name(), Ranges: n, PerNode: map[uint64]int{}}
	from, err := db.Timestamp(ctx)
	if err != nil {
		return run, err
	}
	rctx, cancel := context.WithTimeout(ctx, o.RunMax)
	defer cancel()
	start := time.Now()
	err = forEach(rctx, o.Concurrency, o.Commits, func(w, i int) error {
		i++ // commits are numbered from 1
		return db.Txn(rctx, func(ctx context.Context, txn *client.Txn) error {
			for j := range 2 {
				k := fmt.Appendf(nil, "hot/%d/%d/%d", n, w, (i*2+j)%512)
				if err := txn.Put(ctx, k, []byte("v")); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return run, err
	}
	run.Elapsed = time.Since(start)
	to, err := db.Timestamp(ctx)
	if err != nil {
		return run, err
	}
	ranges, err := db.Ranges(ctx)
	if err != nil {
		return run, err
	}
	end := keys.StatusKey([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	for _, r := range ranges {
		s := r.Desc.GetStartKey()
		if bytes.Compare(s, keys.StatusPrefix) >= 0 && bytes.Compare(s, end) < 0 {
			run.PerRange = append(run.PerRange, HotSpotRange{Encoding: enc.Name(), Ranges: n, Index: len(run.PerRange),
				StartKey: s, Leaseholder: r.LeaseholderNodeID})
		}
	}
	if len(run.PerRange) != n {
		return run, fmt.Errorf("the status table has %d ranges, want %d", len(run.PerRange), n)
	}
	err = db.ScanTxns(ctx, from, to, func(r client.TxnRecord) error {
		// A parallel commit's COMMITTED lands after its client is told;
		// its STAGING record, in the same range, counts meanwhile.
		if !r.Decided && !r.Staged {
			return nil
		}
		k := keys.StatusKey(enc.Key(r.StartTs))
		i := sort.Search(len(run.PerRange), func(i int) bool { return bytes.Compare(run.PerRange[i].StartKey, k) > 0 }) - 1
		if i < 0 {
			return fmt.Errorf("status key %x before the status table's first range", k)
		}
		run.PerRange[i].Records++
		run.PerNode[run.PerRange[i].Leaseholder]++
		run.Records++
		return nil
	})
	return run, err
}

// HotSpotTables formats the runs: a summary (hottest range and node
// against the fair share) and the share of every range.
func HotSpotTables(runs []HotSpotRun) (summary, perRange Table) {
	summary = Table{Title: "status writes: share of the hottest range and of each node",
		Header: []string{"encoding", "ranges", "records", "commits/s", "hottest range %", "fair %", "hottest/fair", "node shares %"}}
	perRange = Table{Title: "status writes per range",
		Header: []string{"encoding", "ranges", "range", "start key", "leaseholder", "records", "share %"}}
	for _, r := range runs {
		best := 0
		for _, x := range r.PerRange {
			best = max(best, x.Records)
			perRange.Rows = append(perRange.Rows, []string{r.Encoding, fmt.Sprint(r.Ranges), fmt.Sprint(x.Index), fmt.Sprintf("%x", x.StartKey),
				fmt.Sprint(x.Leaseholder), fmt.Sprint(x.Records), pct(x.Records, r.Records)})
		}
		var nodes []uint64
		for id := range r.PerNode {
			nodes = append(nodes, id)
		}
		sort.Slice(nodes, func(i, j int) bool { return nodes[i] < nodes[j] })
		ns := ""
		for _, id := range nodes {
			ns += fmt.Sprintf("n%d:%s ", id, pct(r.PerNode[id], r.Records))
		}
		summary.Rows = append(summary.Rows, []string{r.Encoding, fmt.Sprint(r.Ranges), fmt.Sprint(r.Records),
			fmt.Sprintf("%.1f", float64(r.Records)/r.Elapsed.Seconds()), pct(best, r.Records),
			fmt.Sprintf("%.2f", 100/float64(r.Ranges)), fmt.Sprintf("%.2f", r.Hottest()), ns})
	}
	return summary, perRange
}

func pct(a, b int) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", 100*float64(a)/float64(b))
}

// ---- Loaders ----

// Workload is a cell set of the loader experiment.
type Workload struct {
	Name    string
	Rows    int
	Columns int
	Dynamic bool // each row has its own random columns
}

// RecordWorkloads are the record's three cell sets.
var RecordWorkloads = []Workload{
	{Name: "100x100 static", Rows: 100, Columns: 100},
	{Name: "1000x10 static", Rows: 1000, Columns: 10},
	{Name: "16x500 dynamic", Rows: 16, Columns: 500, Dynamic: true},
}

// Cells returns the workload's cells as tickets cells: random 8-byte rows
// (bit-reversed numbers, as tickets rows are), static columns 0..Columns-1
// or, when dynamic, Columns random columns per row below PQ/NP.
func (w Workload) Cells(seed uint64) []txnstatus.Cell {
	rng := rand.New(rand.NewPCG(seed, uint64(w.Rows*7919+w.Columns)))
	cols := txnstatus.DefaultPartitioningQuantum / txnstatus.DefaultRowsPerQuantum
	var out []txnstatus.Cell
	for range w.Rows {
		row := binary.BigEndian.AppendUint64(nil, bits.Reverse64(rng.Uint64N(1<<40)))
		for c := range w.Columns {
			col := uint64(c)
			if w.Dynamic {
				col = rng.Uint64N(cols)
			}
			out = append(out, txnstatus.Cell{Row: row, Column: txnstatus.AppendVarLong(nil, col)})
		}
	}
	return out
}

// Loader turns a cell set into read requests.
type Loader struct {
	Name string
	Plan func(cells []txnstatus.Cell) [][]txnstatus.Cell
}

// Loaders returns the record's three loaders with its limits: CL1 (one
// request per column), full batching (requests of up to CC cells,
// whatever their rows and columns; capped at the server's batch limit)
// and CL2 (selective batching). The record prints CC = 50,000 and SQ =
// 200, which breaks its rule SQ >= CC; its own figures (50 requests for
// 100x100, about 40 for 16x500) show requests of at most SQ cells, so CL2
// runs PartitionForLoad(cells, min(CC, SQ), SQ). "CL2 client" is the
// client's defaults (CC 200, SQ 10,000).
func Loaders(cc, sq int) []Loader {
	full := min(cc, client.StatusTableKeysMax)
	return []Loader{
		{Name: "CL1", Plan: func(cells []txnstatus.Cell) [][]txnstatus.Cell {
			byCol := map[string][]txnstatus.Cell{}
			var order []string
			for _, c := range cells {
				k := string(c.Column)
				if _, ok := byCol[k]; !ok {
					order = append(order, k)
				}
				byCol[k] = append(byCol[k], c)
			}
			var out [][]txnstatus.Cell
			for _, k := range order {
				g := byCol[k]
				for len(g) > 0 {
					n := min(len(g), client.StatusTableKeysMax)
					out = append(out, g[:n])
					g = g[n:]
				}
			}
			return out
		}},
		{Name: "full batching", Plan: func(cells []txnstatus.Cell) [][]txnstatus.Cell {
			var out [][]txnstatus.Cell
			for len(cells) > 0 {
				n := min(len(cells), full)
				out = append(out, cells[:n])
				cells = cells[n:]
			}
			return out
		}},
		{Name: "CL2", Plan: func(cells []txnstatus.Cell) [][]txnstatus.Cell {
			return txnstatus.PartitionForLoad(cells, min(cc, sq), sq)
		}},
		{Name: "CL2 client", Plan: func(cells []txnstatus.Cell) [][]txnstatus.Cell {
			return txnstatus.PartitionForLoad(cells, 200, client.StatusTableKeysMax)
		}},
	}
}

// LoaderOptions configure the loader experiment.
type LoaderOptions struct {
	ClusterOptions
	CC, SQ      int           // default 50,000 and 200 (the record's)
	Readers     []int         // default 1, 10
	Duration    time.Duration // per case; default 5s
	LoadsMax    int           // per reader per case; default 100
	InFlightMax int           // requests of one load in flight; default 64
	Seed        uint64
	Workloads   []Workload // default RecordWorkloads
}

func (o *LoaderOptions) ensureDefaults() {
	if o.CC == 0 {
		o.CC = 50_000
	}
	if o.SQ == 0 {
		o.SQ = 200
	}
	if len(o.Readers) == 0 {
		o.Readers = []int{1, 10}
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.LoadsMax == 0 {
		o.LoadsMax = 100
	}
	if o.InFlightMax == 0 {
		o.InFlightMax = 64
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if len(o.Workloads) == 0 {
		o.Workloads = RecordWorkloads
	}
}

// LoaderCell is one measured case.
type LoaderCell struct {
	Workload      string
	Loader        string
	Readers       int
	Requests      int // per load
	Loads         int
	P50, P95, P99 time.Duration
}

// LoaderBench starts a 3-node cluster (tickets), writes every workload's
// cells into its status table, and times whole loads of each cell set by
// each loader, by one reader and by several at once.
func LoaderBench(ctx context.Context, o LoaderOptions, progress func(string)) ([]LoaderCell, error) {
	o.ensureDefaults()
	if o.SQ < 1 || o.CC < 1 {
		return nil, fmt.Errorf("loader limits CC %d and SQ %d must be positive", o.CC, o.SQ)
	}
	progress("loaders: starting a 3-node cluster...")
	c, err := startCluster(o.ClusterOptions, "tickets")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	db, err := client.Open(ctx, c.Addrs())
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var out []LoaderCell
	for wi, w := range o.Workloads {
		cells := w.Cells(o.Seed + uint64(wi))
		progress(fmt.Sprintf("loaders: writing %d cells of %s...", len(cells), w.Name))
		for i := 0; i < len(cells); i += client.StatusTableKeysMax {
			chunk := cells[i:min(i+client.StatusTableKeysMax, len(cells))]
			ks, vs := make([][]byte, len(chunk)), make([][]byte, len(chunk))
			for j, c := range chunk {
				ks[j] = append(append([]byte(nil), c.Row...), c.Column...)
				vs[j] = []byte{0x21} // a small delta, as tickets stores
			}
			if _, err := db.StatusTableWrite(ctx, ks, vs); err != nil {
				return nil, err
			}
		}
		for _, l := range Loaders(o.CC, o.SQ) {
			plan := l.Plan(cells)
			for _, readers := range o.Readers {
				progress(fmt.Sprintf("loaders: %s, %s (%d requests per load), %d reader(s)...", w.Name, l.Name, len(plan), readers))
				cell, err := loaderCase(ctx, db, plan, readers, o)
				if err != nil {
					return nil, fmt.Errorf("%s, %s: %w", w.Name, l.Name, err)
				}
				cell.Workload, cell.Loader = w.Name, l.Name
				out = append(out, cell)
			}
		}
	}
	return out, nil
}

func loaderCase(ctx context.Context, db *client.DB, plan [][]txnstatus.Cell, readers int, o LoaderOptions) (LoaderCell, error) {
	cell := LoaderCell{Readers: readers, Requests: len(plan)}
	reqs := make([][][]byte, len(plan))
	want := 0
	for i, b := range plan {
		for _, c := range b {
			reqs[i] = append(reqs[i], append(append([]byte(nil), c.Row...), c.Column...))
		}
		want += len(b)
	}
	// The duration stops new loads; a load under way may finish within a
	// further loadMax.
	const loadMax = 2 * time.Minute
	deadline := time.Now().Add(o.Duration)
	ctx, cancel := context.WithTimeout(ctx, o.Duration+loadMax)
	defer cancel()
	var (
		mu       sync.Mutex
		samples  []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	load := func() error {
		var found atomic.Int64
		var lerr error
		var lmu sync.Mutex
		var lwg sync.WaitGroup
		slots := make(chan struct{}, o.InFlightMax)
		for _, ks := range reqs {
			slots <- struct{}{}
			lwg.Add(1)
			go func() {
				defer func() { <-slots; lwg.Done() }()
				vs, err := db.StatusTableRead(ctx, ks)
				if err != nil {
					lmu.Lock()
					if lerr == nil {
						lerr = err
					}
					lmu.Unlock()
					return
				}
				for _, v := range vs {
					if v != nil {
						found.Add(1)
					}
				}
			}()
		}
		lwg.Wait()
		if lerr != nil {
			return lerr
		}
		if int(found.Load()) != want {
			return fmt.Errorf("a load found %d of its %d cells", found.Load(), want)
		}
		return nil
	}
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < o.LoadsMax && ctx.Err() == nil && (i == 0 || time.Now().Before(deadline)); i++ {
				t0 := time.Now()
				err := load()
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				samples = append(samples, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return cell, firstErr
	}
	if len(samples) == 0 {
		return cell, fmt.Errorf("no load finished within %v", o.Duration+loadMax)
	}
	cell.Loads = len(samples)
	cell.P50, cell.P95, cell.P99 = percentiles(samples)
	return cell, nil
}

// RecordLoaderFigures are the record's loader tables (ms): workload ->
// readers -> loader (CL1, full batching, CL2) -> p50, p95, p99.
var RecordLoaderFigures = map[string]map[int]map[string][3]float64{
	"100x100 static": {
		1:  {"CL1": {124.2, 169.7, 204.1}, "full batching": {164.4, 204.0, 237.2}, "CL2": {118.9, 163.5, 195.2}},
		10: {"CL1": {1042.0, 1355.2, 1530.6}, "full batching": {1248.5, 1636.1, 1783.2}, "CL2": {1027.4, 1365.1, 1530.8}},
	},
	"1000x10 static": {
		1:  {"CL1": {122.6, 164.3, 170.9}, "full batching": {169.4, 222.7, 269.1}, "CL2": {118.6, 161.5, 188.0}},
		10: {"CL1": {1205.9, 1515.1, 1595.8}, "full batching": {1172.5, 1656.9, 1928.3}, "CL2": {1199.7, 1502.8, 1618.6}},
	},
	"16x500 dynamic": {
		1:  {"CL1": {328.5, 432.3, 473.3}, "full batching": {144.6, 195.5, 254.8}, "CL2": {102.7, 143.8, 162.1}},
		10: {"CL1": {3141.8, 3390.1, 3497.2}, "full batching": {899.2, 1350.6, 1635.8}, "CL2": {888.4, 1189.0, 1307.2}},
	},
}

// LoaderTable formats the cells beside the record's figures.
func LoaderTable(cells []LoaderCell) Table {
	t := Table{Title: "loaders: time of one whole load, ms (record's figures beside, Cassandra)",
		Header: []string{"workload", "readers", "loader", "requests/load", "loads", "p50", "p95", "p99", "record p50", "record p95", "record p99"}}
	for _, c := range cells {
		row := []string{c.Workload, fmt.Sprint(c.Readers), c.Loader, fmt.Sprint(c.Requests), fmt.Sprint(c.Loads), ms(c.P50), ms(c.P95), ms(c.P99)}
		if r, ok := RecordLoaderFigures[c.Workload][c.Readers][c.Loader]; ok {
			row = append(row, fmt.Sprint(r[0]), fmt.Sprint(r[1]), fmt.Sprint(r[2]))
		} else {
			row = append(row, "-", "-", "-")
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// ---- End to end ----

// EndToEndOptions configure the end-to-end experiment.
type EndToEndOptions struct {
	ClusterOptions
	Keys   int // default 10,000
	Txns   int // default 1,000 (Keys must be a multiple)
	Trials int // per variant; default 3
	// TrialMax bounds one trial (writing the intents and the scan);
	// default 5 minutes.
	TrialMax time.Duration
}

// EndToEndCell is one trial of one variant.
type EndToEndCell struct {
	Variant string
	Trial   int
	Scan    time.Duration
	Lookups int64 // status lookup requests the reader sent
	Keys    int
}

// EndToEnd starts a 3-node cluster; in each trial a writer that leaves its
// intents (client.Options.LeaveIntents, no 1PC, no parallel commits)
// commits Txns transactions of Keys/Txns keys each, key i written by
// transaction i mod Txns, so every stretch of the scan meets many
// transactions; then a new reader scans the keys once. Variants
// alternate: "batched+cache" (the client's defaults) and "one per txn"
// (CC = SQ = 1, no status cache: each transaction's status read on its
// own, every time it is met, as before issue 10).
func EndToEnd(ctx context.Context, o EndToEndOptions, progress func(string)) ([]EndToEndCell, error) {
	if o.Keys == 0 {
		o.Keys = 10_000
	}
	if o.Txns == 0 {
		o.Txns = 1_000
	}
	if o.Trials == 0 {
		o.Trials = 3
	}
	if o.TrialMax == 0 {
		o.TrialMax = 5 * time.Minute
	}
	if o.Txns < 1 || o.Keys%o.Txns != 0 || o.Keys > 100_000 {
		return nil, fmt.Errorf("end to end: %d keys must be a multiple of %d transactions and at most 100,000", o.Keys, o.Txns)
	}
	progress("end to end: starting a 3-node cluster...")
	c, err := startCluster(o.ClusterOptions, "tickets")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	writer, err := client.Open(ctx, c.Addrs(), client.WithOptions(client.Options{LeaveIntents: true,
		OnePC: client.ToggleOff, ParallelCommits: client.ToggleOff}))
	if err != nil {
		return nil, err
	}
	defer writer.Close()
	variants := []struct {
		name string
		opts client.Options
	}{
		{"batched+cache", client.Options{IntentRoundsMax: 1000}},
		{"one per txn", client.Options{IntentRoundsMax: 1000, StatusLookupCrossColumnMax: 1, StatusLookupSingleQueryMax: 1, StatusCacheEntriesMax: -1}},
	}
	var out []EndToEndCell
	for trial := range o.Trials {
		for _, v := range variants {
			cell, err := endToEndTrial(ctx, o, c.Addrs(), writer, v.opts, trial, progress, v.name)
			if err != nil {
				return nil, fmt.Errorf("%s, trial %d: %w", v.name, trial, err)
			}
			out = append(out, cell)
		}
	}
	return out, nil
}

func endToEndTrial(ctx context.Context, o EndToEndOptions, addrs []string, writer *client.DB, ro client.Options, trial int, progress func(string), name string) (EndToEndCell, error) {
	cell := EndToEndCell{Variant: name, Trial: trial}
	ctx, cancel := context.WithTimeout(ctx, o.TrialMax)
	defer cancel()
	progress(fmt.Sprintf("end to end: %s, trial %d: %d transactions leave intents on %d keys...", name, trial, o.Txns, o.Keys))
	per := o.Keys / o.Txns
	err := forEach(ctx, 16, o.Txns, func(_, t int) error {
		return writer.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
			for j := range per {
				k := fmt.Appendf(nil, "e2e/%06d", j*o.Txns+t)
				if err := txn.Put(ctx, k, fmt.Appendf(nil, "%d/%d", trial, t)); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return cell, err
	}
	reader, err := client.Open(ctx, addrs, client.WithOptions(ro))
	if err != nil {
		return cell, err
	}
	defer reader.Close()
	before := reader.Stats().StatusLookupRequests
	progress(fmt.Sprintf("end to end: %s, trial %d: scanning...", name, trial))
	t0 := time.Now()
	kvs, err := reader.Scan(ctx, []byte("e2e/"), []byte("e2e0"), 0)
	cell.Scan = time.Since(t0)
	if err != nil {
		return cell, err
	}
	cell.Keys = len(kvs)
	if cell.Keys != o.Keys {
		return cell, fmt.Errorf("the scan returned %d keys, want %d", cell.Keys, o.Keys)
	}
	for _, kv := range kvs {
		if !bytes.HasPrefix(kv.Value, fmt.Appendf(nil, "%d/", trial)) {
			return cell, fmt.Errorf("key %s holds %q, not trial %d's committed value", kv.Key, kv.Value, trial)
		}
	}
	cell.Lookups = reader.Stats().StatusLookupRequests - before
	return cell, nil
}

// EndToEndTable formats the trials, with each trial's ratio.
func EndToEndTable(cells []EndToEndCell) Table {
	t := Table{Title: "end to end: one scan over keys holding intents of committed, unresolved transactions",
		Header: []string{"variant", "trial", "keys", "scan ms", "status lookup requests"}}
	for _, c := range cells {
		t.Rows = append(t.Rows, []string{c.Variant, fmt.Sprint(c.Trial), fmt.Sprint(c.Keys), ms(c.Scan), fmt.Sprint(c.Lookups)})
	}
	return t
}

// forEach calls f(w, i) for i in [0, n) on workers goroutines (w is the
// worker's number), each taking the next i until all are done, ctx ends or
// a call fails; it returns the first error.
func forEach(ctx context.Context, workers, n int, f func(w, i int) error) error {
	var next atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(w, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
