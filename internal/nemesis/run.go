package nemesis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/canopy-db/canopy/client"
	"google.golang.org/grpc"
)

// Config is one nemesis run.
type Config struct {
	// Binary is the canopy executable the nodes run.
	Binary string
	// Dir holds the nodes' stores and logs.
	Dir string
	// Nodes is the cluster size (at least 3).
	Nodes int
	// Workload is one of Workloads.
	Workload string
	// Kinds are injected in turn, each on a node chosen from Seed.
	Kinds []Kind
	// Duration is how long faults are injected; then every fault is
	// healed, the clients stop and the history is checked.
	Duration time.Duration
	// Faults, when positive, ends the run once that many faults have been
	// injected and healed, however long they took, and Duration may be 0
	// (a count, not a time, so that a loaded machine makes the run longer
	// instead of leaving kinds out).
	Faults int
	// Interval is the quiet time between a heal and the next fault;
	// FaultDuration how long each fault lasts.
	Interval, FaultDuration time.Duration
	// Workers is the number of concurrent clients (default 4).
	Workers int
	// OpTimeout bounds one operation (default 10s).
	OpTimeout time.Duration
	// Seed chooses the fault targets and the workload's operations.
	Seed uint64
	// Progress receives a line every ProgressEvery (default 10s) and one
	// per fault; nil discards.
	Progress      io.Writer
	ProgressEvery time.Duration
	// StartArgs are extra flags of every `canopy start`.
	StartArgs []string
	// CommitProtocol is the cluster's commit protocol (`canopy init
	// --commit-protocol`; "" = default).
	CommitProtocol string
}

// injectTries is how many times a kind whose injection failed is tried
// before the run moves on to the next kind.
const injectTries = 3

// RecoveryMax bounds the wait, after a heal, for the clients' first
// success; a heal without one by then is reported unrecovered.
const RecoveryMax = time.Minute

// Recovery is one heal and how long the clients took to succeed again.
type Recovery struct {
	Fault     string
	HealedAt  time.Duration // since the run started
	Recovered bool
	// After is from the heal to the first operation that was called after
	// the heal and succeeded.
	After time.Duration
	// During is from the injection to the first operation that was called
	// after the injection and succeeded before the heal (DuringOK false:
	// none did): how long the clients went without a success because of
	// the fault (issue 13, item 7).
	During   time.Duration
	DuringOK bool
}

// Report is a run's verdict.
type Report struct {
	Config     Config
	Started    time.Time
	Elapsed    time.Duration
	Faults     map[Kind]int
	Outcomes   map[Outcome]int64
	Violations []string
	Recoveries []Recovery
	// Exits are the processes that stopped by themselves under a fault
	// (sync-error): "n2: exit status 1: <last log line>".
	Exits []string
	// AmbiguousResolved counts the commits whose outcome the clients first
	// did not know and then looked up (client.Stats).
	AmbiguousResolved int64
	// CheckErr is set when the history could not be checked (no verdict:
	// never a pass).
	CheckErr error
}

// OK reports whether the run was checked and found no violation.
func (r *Report) OK() bool { return r.CheckErr == nil && len(r.Violations) == 0 }

func (c *Config) validate() error {
	if c.Binary == "" || c.Dir == "" {
		return errors.New("invalid argument: Binary and Dir are required")
	}
	if c.Nodes < 3 {
		return fmt.Errorf("invalid argument: %d nodes (at least 3: a fault must leave a quorum)", c.Nodes)
	}
	if len(c.Kinds) == 0 {
		return errors.New("invalid argument: no fault kinds")
	}
	if c.Faults < 0 {
		return fmt.Errorf("invalid argument: %d faults (0: as many as the duration allows)", c.Faults)
	}
	if (c.Duration <= 0 && c.Faults == 0) || c.Interval <= 0 || c.FaultDuration <= 0 {
		return fmt.Errorf("invalid argument: duration %v, interval %v and fault duration %v must be positive", c.Duration, c.Interval, c.FaultDuration)
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 10 * time.Second
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 10 * time.Second
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return nil
}

// Run starts the cluster, runs the workload under the fault schedule,
// heals, checks and stops every node. An error means the run itself
// failed (a node would not start, ...); violations are in the Report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	wl, err := newWorkload(cfg.Workload, cfg.OpTimeout)
	if err != nil {
		return nil, err
	}
	rep := &Report{Config: cfg, Started: time.Now(), Faults: map[Kind]int{}, Outcomes: map[Outcome]int64{}}
	logf := func(format string, args ...any) {
		fmt.Fprintf(cfg.Progress, "nemesis %8s  %s\n", time.Since(rep.Started).Round(time.Second), fmt.Sprintf(format, args...))
	}
	c, err := newCluster(cfg.Binary, cfg.Dir, cfg.Nodes, cfg.StartArgs)
	if err != nil {
		return nil, err
	}
	defer c.stopAll()
	for i := range c.procs {
		if err := c.start(ctx, i); err != nil {
			return nil, err
		}
	}
	ictx, cancel := context.WithTimeout(ctx, time.Minute)
	initArgs := []string{"init", "--host", c.addrs[0], "--initial-ranges", "4"}
	if cfg.CommitProtocol != "" {
		initArgs = append(initArgs, "--commit-protocol", cfg.CommitProtocol)
	}
	_, err = c.cli(ictx, initArgs...)
	cancel()
	if err != nil {
		return nil, err
	}
	c.cutter = newCutter()
	db, err := client.Open(ctx, c.addrs, client.WithDialOptions(grpc.WithContextDialer(c.cutter.Dial)))
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := c.learnNodeIDs(ctx, db); err != nil {
		return nil, err
	}
	if err := wl.setup(ctx, db); err != nil {
		return nil, fmt.Errorf("workload setup: %w", err)
	}
	logf("%d nodes up (%s), workload %s, %d workers, faults %v every %v for %v, seed %d",
		cfg.Nodes, cfg.Dir, cfg.Workload, cfg.Workers, cfg.Kinds, cfg.Interval, cfg.FaultDuration, cfg.Seed)

	// Recovery tracking: the open heal, if any, and its first success.
	var rec struct {
		sync.Mutex
		open   *Recovery
		healAt time.Time
		// injected: the fault under way, if any, and when it began.
		injected   *Recovery
		injectedAt time.Time
	}
	var counts [3]atomic.Int64
	success := func(call time.Time, ret time.Time) {
		rec.Lock()
		if rec.open != nil && !rec.open.Recovered && !call.Before(rec.healAt) {
			rec.open.Recovered, rec.open.After = true, ret.Sub(rec.healAt)
		}
		if rec.injected != nil && !rec.injected.DuringOK && !call.Before(rec.injectedAt) {
			rec.injected.DuringOK, rec.injected.During = true, ret.Sub(rec.injectedAt)
		}
		rec.Unlock()
	}
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)+1))
			for wctx.Err() == nil {
				call := time.Now()
				o := wl.op(wctx, db, rng, w)
				if o != OK && wctx.Err() != nil {
					// Cut short by the end of the run: recorded in the
					// history, not counted as the cluster's outcome.
					break
				}
				counts[o].Add(1)
				if o == OK {
					success(call, time.Now())
				}
			}
		}(w)
	}
	progressDone := make(chan struct{})
	var current atomic.Value
	current.Store("none")
	go func() {
		t := time.NewTicker(cfg.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-t.C:
				logf("ops ok %d, failed %d, ambiguous %d; fault: %s",
					counts[OK].Load(), counts[Failed].Load(), counts[Ambiguous].Load(), current.Load())
			}
		}
	}()
	closeRecovery := func() {
		rec.Lock()
		if rec.open != nil {
			rep.Recoveries = append(rep.Recoveries, *rec.open)
			if !rec.open.Recovered {
				logf("no success within %v after healing %s", RecoveryMax, rec.open.Fault)
			} else {
				logf("recovered from %s in %v", rec.open.Fault, rec.open.After.Round(time.Millisecond))
			}
			rec.open = nil
		}
		rec.Unlock()
	}
	frng := rand.New(rand.NewPCG(cfg.Seed, 0))
	end := rep.Started.Add(cfg.Duration)
	injected := 0
	// more says whether another fault is due: by count when Faults is
	// set, else by time.
	more := func() bool {
		if cfg.Faults > 0 {
			return injected < cfg.Faults
		}
		return time.Now().Before(end)
	}
	var runErr error
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	// waitRecovery waits up to max for the open heal's first success.
	waitRecovery := func(max time.Duration) {
		deadline := time.Now().Add(max)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			rec.Lock()
			done := rec.open == nil || rec.open.Recovered
			rec.Unlock()
			if done {
				return
			}
			sleep(50 * time.Millisecond)
		}
	}
	next, failed := 0, 0
	for more() && runErr == nil {
		if !sleep(cfg.Interval) {
			break
		}
		// The quiet time lasts until the clients succeeded once after the
		// heal (at most RecoveryMax), so that every heal gets its
		// recovery time.
		waitRecovery(RecoveryMax)
		closeRecovery()
		if !more() {
			break
		}
		k := cfg.Kinds[next%len(cfg.Kinds)]
		f, err := c.inject(ctx, db, k, frng)
		// A kind that could not be injected is tried again (a few times)
		// before the next kind, so that a count-bound run covers every
		// kind.
		if failed++; f != nil || failed >= injectTries {
			next, failed = next+1, 0
		}
		if f != nil {
			injected++
			rep.Faults[k]++
			current.Store(f.String())
			logf("inject %s", f)
			rec.Lock()
			rec.injected, rec.injectedAt = &Recovery{Fault: f.String()}, f.at
			rec.Unlock()
		}
		if err != nil {
			logf("inject %s: %v", k, err)
		}
		if f == nil {
			continue
		}
		sleep(cfg.FaultDuration)
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		err = c.heal(hctx, db, f)
		cancel()
		if err != nil {
			runErr = fmt.Errorf("heal %s: %w", f, err)
			break
		}
		current.Store("none")
		rec.Lock()
		rec.healAt = time.Now()
		rec.open = &Recovery{Fault: f.String(), HealedAt: rec.healAt.Sub(rep.Started)}
		if d := rec.injected; d != nil && d.Fault == f.String() {
			rec.open.During, rec.open.DuringOK = d.During, d.DuringOK
			if d.DuringOK {
				logf("first success %v after injecting %s", d.During.Round(time.Millisecond), f)
			} else {
				logf("no success during %s", f)
			}
		}
		rec.injected = nil
		rec.Unlock()
		logf("healed %s", f)
	}
	// Let the clients succeed once after the last heal, then stop them.
	waitRecovery(RecoveryMax)
	closeRecovery()
	stopWorkers()
	wg.Wait()
	close(progressDone)
	for _, o := range []Outcome{OK, Failed, Ambiguous} {
		rep.Outcomes[o] = counts[o].Load()
	}
	if runErr != nil {
		rep.Elapsed = time.Since(rep.Started)
		return rep, runErr
	}
	rep.AmbiguousResolved = db.Stats().AmbiguousResolved
	for _, e := range c.exits {
		rep.Exits = append(rep.Exits, fmt.Sprintf("n%d: exit status %d: %s", e.slot+1, e.code, e.line))
	}
	logf("checking the history")
	cctx := context.WithoutCancel(ctx)
	rep.Violations, rep.CheckErr = wl.check(cctx, db)
	for _, e := range c.exits {
		// A node that meets a failed fsync must stop with one error line
		// and exit status 1, never crash.
		if e.code != 1 || !strings.HasPrefix(e.line, "error: ") {
			rep.Violations = append(rep.Violations, fmt.Sprintf("unclean exit: n%d: exit status %d: %s", e.slot+1, e.code, e.line))
		}
	}
	rep.Elapsed = time.Since(rep.Started)
	return rep, nil
}

// Print writes the verdict table.
func (r *Report) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "workload\t%s\n", r.Config.Workload)
	if r.Config.CommitProtocol != "" {
		fmt.Fprintf(tw, "commit protocol\t%s\n", r.Config.CommitProtocol)
	}
	fmt.Fprintf(tw, "nodes\t%d\n", r.Config.Nodes)
	fmt.Fprintf(tw, "seed\t%d\n", r.Config.Seed)
	fmt.Fprintf(tw, "elapsed\t%v\n", r.Elapsed.Round(time.Second))
	total := 0
	for _, k := range sortedKinds(r.Faults) {
		fmt.Fprintf(tw, "faults %s\t%d\n", k, r.Faults[k])
		total += r.Faults[k]
	}
	fmt.Fprintf(tw, "faults total\t%d\n", total)
	for _, o := range []Outcome{OK, Failed, Ambiguous} {
		fmt.Fprintf(tw, "operations %s\t%d\n", o, r.Outcomes[o])
	}
	var recs []time.Duration
	unrecovered := 0
	for _, rc := range r.Recoveries {
		if rc.Recovered {
			recs = append(recs, rc.After)
		} else {
			unrecovered++
		}
	}
	if len(recs) > 0 {
		fmt.Fprintf(tw, "recovery (heal to first success)\tmin %v  median %v  max %v  (%d heals)\n",
			minDur(recs).Round(time.Millisecond), medianDur(recs).Round(time.Millisecond), maxDur(recs).Round(time.Millisecond), len(recs))
	}
	fmt.Fprintf(tw, "commits looked up after an ambiguous reply\t%d\n", r.AmbiguousResolved)
	fmt.Fprintf(tw, "nodes that stopped themselves\t%d\n", len(r.Exits))
	fmt.Fprintf(tw, "heals without a success within %v\t%d\n", RecoveryMax, unrecovered)
	byKind := map[Kind][]time.Duration{}
	for _, rc := range r.Recoveries {
		if rc.Recovered {
			k := Kind(strings.Fields(rc.Fault)[0])
			byKind[k] = append(byKind[k], rc.After)
		}
	}
	for _, k := range sortedKinds(byKind) {
		d := byKind[k]
		fmt.Fprintf(tw, "recovery %s\tmedian %v  max %v\n", k, medianDur(d).Round(time.Millisecond), maxDur(d).Round(time.Millisecond))
	}
	during, none := map[Kind][]time.Duration{}, map[Kind]int{}
	for _, rc := range r.Recoveries {
		k := Kind(strings.Fields(rc.Fault)[0])
		if rc.DuringOK {
			during[k] = append(during[k], rc.During)
		} else {
			none[k]++
			during[k] = append(during[k], nil...)
		}
	}
	for _, k := range sortedKinds(during) {
		d := during[k]
		line := fmt.Sprintf("none in %d of %d", none[k], len(d)+none[k])
		if len(d) > 0 {
			line = fmt.Sprintf("median %v  max %v  (%s)", medianDur(d).Round(time.Millisecond), maxDur(d).Round(time.Millisecond), line)
		}
		fmt.Fprintf(tw, "fault to first success %s\t%s\n", k, line)
	}
	switch {
	case r.CheckErr != nil:
		fmt.Fprintf(tw, "violations\tNO VERDICT: %v\n", r.CheckErr)
	default:
		fmt.Fprintf(tw, "violations\t%d\n", len(r.Violations))
	}
	_ = tw.Flush()
	for _, e := range r.Exits {
		fmt.Fprintf(w, "  stopped: %s\n", e)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  %s\n", v)
	}
	if r.OK() {
		fmt.Fprintln(w, "verdict: PASS")
	} else {
		fmt.Fprintln(w, "verdict: FAIL")
	}
}

func minDur(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d {
		m = min(m, x)
	}
	return m
}

func maxDur(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

func medianDur(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[len(s)/2]
}
