package kvbench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/bench"
	"github.com/canopy-db/canopy/internal/bench/latency"
)

// Outcome is what one operation of a workload did.
type Outcome struct {
	// Read marks a read (counted in Result.Reads and Result.Read);
	// anything else is a write.
	Read bool
	// NotFound marks a read that found no value.
	NotFound bool
	// Retries counts the attempts after the first that the operation
	// made (transactions that lost a conflict and ran again).
	Retries int
	// Err is the operation's failure; nil if it succeeded.
	Err error
}

// Workload is what Drive runs: each worker calls Op in a loop.
type Workload struct {
	// Name is the workload's name in tables and plots ("put", "txn").
	Name string
	// ReadPercent is recorded in Result (single-key workloads).
	ReadPercent int
	// Seed is mixed into each worker's random source, so that two
	// workloads at one concurrency choose different keys.
	Seed uint64
	// Op runs one operation with the worker's random source. It must
	// return promptly once ctx is done.
	Op func(ctx context.Context, rng *rand.Rand) Outcome
	// ShowRetries adds the retries so far to the progress line.
	ShowRetries bool
}

// Result is one run: one workload at one concurrency.
type Result struct {
	// Workload is Workload.Name.
	Workload    string
	ReadPercent int
	Concurrency int
	// Ops counts completed calls (Reads + Writes) in the measured time.
	Ops, Reads, Writes int64
	// Errors counts failed calls; FirstError is the first one's message.
	Errors     int64
	FirstError string
	// NotFound counts Gets that found no value (zero after Load).
	NotFound int64
	// Retries counts the attempts after the first of the calls counted
	// in Ops or Errors (transactions only; 0 for single-key calls).
	Retries int64
	// Elapsed is the measured time (Options.Duration, or less if OpsMax
	// was reached first).
	Elapsed time.Duration
	// All, Read and Write are the latencies of successful calls.
	All, Read, Write latency.Snapshot
	// ProcessCPU is the CPU time (user + system) this whole process used
	// during the measured time: the client's, and the nodes' too when the
	// cluster runs in this process. 0 where the platform cannot tell.
	ProcessCPU time.Duration
	// ServerPIDs is how many processes ServerCPU sums (0: not measured).
	ServerPIDs int
	// ServerCPU is the CPU time the processes of Options.ServerPIDs used
	// during the measured time.
	ServerCPU time.Duration
	// OtherCPU is the CPU time the rest of the machine used during the
	// measured time (bench.SystemBusyCPU less ProcessCPU and ServerCPU);
	// -1 where the platform cannot tell.
	OtherCPU time.Duration
}

// OtherCPUPercent is OtherCPU over the measured time, in percent of one
// CPU; -1 if unknown.
func (r Result) OtherCPUPercent() float64 {
	if r.Elapsed <= 0 || r.OtherCPU < 0 {
		return -1
	}
	return 100 * r.OtherCPU.Seconds() / r.Elapsed.Seconds()
}

// CPUPercent is ProcessCPU over the measured time, in percent of one CPU
// (200 means two CPUs busy).
func (r Result) CPUPercent() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return 100 * r.ProcessCPU.Seconds() / r.Elapsed.Seconds()
}

// ServerCPUPerOp is ServerCPU per completed call, and false if the server
// processes were not measured or no call completed.
func (r Result) ServerCPUPerOp() (time.Duration, bool) {
	if r.ServerPIDs == 0 || r.Ops == 0 {
		return 0, false
	}
	return r.ServerCPU / time.Duration(r.Ops), true
}

// OpsPerSecond is completed calls per second of measured time.
func (r Result) OpsPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Run runs one single-key workload: concurrency workers, each choosing a
// key uniformly and then a Get with probability readPercent/100, else a
// Put.
func Run(ctx context.Context, kv KV, o Options, readPercent, concurrency int) (Result, error) {
	o.EnsureDefaults()
	if readPercent < 0 || readPercent > 100 {
		return Result{}, fmt.Errorf("kvbench: read percent %d not in [0, 100]", readPercent)
	}
	vals := NewValues(o.ValueBytes, o.Seed)
	return Drive(ctx, o, Workload{
		Name:        WorkloadName(readPercent),
		ReadPercent: readPercent,
		Seed:        uint64(readPercent) << 32,
		Op: func(ctx context.Context, rng *rand.Rand) Outcome {
			k := Key(rng.IntN(o.Keys))
			if rng.IntN(100) < readPercent {
				_, found, err := kv.Get(ctx, k)
				return Outcome{Read: true, NotFound: err == nil && !found, Err: err}
			}
			return Outcome{Err: kv.Put(ctx, k, vals.Pick(rng))}
		},
	}, concurrency)
}

// Drive runs one workload with concurrency workers until Options.Duration
// has been measured or Options.OpsMax calls have completed, after an
// uncounted Options.Warmup. A call is counted if it started after the
// warm-up and completed before the end; calls still in flight at the end
// are cancelled and counted nowhere.
func Drive(ctx context.Context, o Options, wl Workload, concurrency int) (Result, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	if concurrency < 1 || concurrency > ConcurrencyMax {
		return Result{}, fmt.Errorf("kvbench: concurrency %d not in [1, %d]", concurrency, ConcurrencyMax)
	}
	res := Result{Workload: wl.Name, ReadPercent: wl.ReadPercent, Concurrency: concurrency, ServerPIDs: len(o.ServerPIDs)}

	var (
		all, reads, writes, window latency.Recorder
		// measuring is set when the warmup ends; ops, nReads, nWrites,
		// errs, missing and retries count only calls started after it.
		measuring                                    atomic.Bool
		ops, nReads, nWrites, errs, missing, retries atomic.Int64
		firstErr                                     atomic.Pointer[string]
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(o.Seed^wl.Seed, uint64(concurrency)<<20|uint64(w)))
			for runCtx.Err() == nil {
				counted := measuring.Load()
				start := time.Now()
				out := wl.Op(runCtx, rng)
				d := time.Since(start)
				if runCtx.Err() != nil {
					return // the run ended during this call: neither an op nor a failure
				}
				if !counted {
					continue
				}
				retries.Add(int64(out.Retries))
				if out.Err != nil {
					if errs.Add(1) == 1 {
						msg := out.Err.Error()
						firstErr.Store(&msg)
					}
					continue
				}
				if out.NotFound {
					missing.Add(1)
				}
				all.Record(d)
				if o.Progress != nil {
					window.Record(d)
				}
				if out.Read {
					reads.Record(d)
					nReads.Add(1)
				} else {
					writes.Record(d)
					nWrites.Add(1)
				}
				if ops.Add(1) >= o.OpsMax {
					stop()
				}
			}
		}(w)
	}

	if o.Warmup > 0 {
		select {
		case <-time.After(o.Warmup):
		case <-runCtx.Done():
		}
	}
	measuring.Store(true)
	serverStart, err := bench.ProcessesCPU(o.ServerPIDs)
	if err != nil {
		stop()
		wg.Wait()
		return Result{}, err
	}
	if o.Measured != nil {
		o.Measured(true)
	}
	start, cpuStart := time.Now(), ProcessCPU()
	sysStart, sysOK := bench.SystemBusyCPU()
	deadline := time.NewTimer(o.Duration)
	defer deadline.Stop()
	tick := time.NewTicker(o.ProgressInterval)
	defer tick.Stop()
	prevOps, prevAt := int64(0), start
	for done := false; !done; {
		select {
		case <-deadline.C:
			done = true
		case <-runCtx.Done():
			done = true
		case now := <-tick.C:
			if o.Progress != nil {
				n := ops.Load()
				s := window.Take(true)
				extra := ""
				if wl.ShowRetries {
					extra = fmt.Sprintf("  retries %d", retries.Load())
				}
				fmt.Fprintf(o.Progress, "  %-12s c=%-4d %5.1fs  %8.0f ops/s  p50 %7.2fms  p99 %7.2fms  ops %8d  errors %d%s   \r",
					wl.Name, concurrency, now.Sub(start).Seconds(),
					float64(n-prevOps)/now.Sub(prevAt).Seconds(), Millis(s.P50), Millis(s.P99), n, errs.Load(), extra)
				prevOps, prevAt = n, now
			}
		}
	}
	// Throughput counts the calls completed by now over the time measured
	// so far; calls still in flight are cancelled and not counted (a call
	// that completes after this instant would inflate the rate).
	res.Elapsed, res.ProcessCPU = time.Since(start), ProcessCPU()-cpuStart
	if o.Measured != nil {
		o.Measured(false)
	}
	serverEnd, serverErr := bench.ProcessesCPU(o.ServerPIDs)
	res.ServerCPU = serverEnd - serverStart
	res.OtherCPU = -1
	if sysEnd, ok := bench.SystemBusyCPU(); ok && sysOK {
		// The clocks tick differently (/proc/stat in 10ms steps): a
		// small negative difference means none.
		res.OtherCPU = max(0, sysEnd-sysStart-res.ProcessCPU-res.ServerCPU)
	}
	stop()
	wg.Wait()
	// Counted once every worker has stopped, so that Reads + Writes = Ops
	// (at most one call per worker completes between the two instants).
	res.Ops, res.Reads, res.Writes = ops.Load(), nReads.Load(), nWrites.Load()
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	if serverErr != nil {
		return Result{}, serverErr
	}
	res.Errors, res.NotFound, res.Retries = errs.Load(), missing.Load(), retries.Load()
	if p := firstErr.Load(); p != nil {
		res.FirstError = *p
	}
	res.All, res.Read, res.Write = all.Take(false), reads.Take(false), writes.Take(false)
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "%120s\r", "")
	}
	return res, nil
}

// Millis converts a duration to fractional milliseconds.
func Millis(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
