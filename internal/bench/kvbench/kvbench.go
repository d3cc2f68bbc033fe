package kvbench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/internal/bench"
	"github.com/canopy-db/canopy/internal/bench/latency"
)

// KV is the part of *client.DB the benchmark uses.
type KV interface {
	Put(ctx context.Context, key, value []byte) error
	Get(ctx context.Context, key []byte) ([]byte, bool, error)
}

// Options configure the benchmark. The zero value of a field means its
// default; Validate checks them after EnsureDefaults.
type Options struct {
	// ValueBytes is the size of every value written. Default 256.
	ValueBytes int
	// Keys is the size of the keyspace. Default 10,000.
	Keys int
	// Duration is the measured time of one run. Default 10s.
	Duration time.Duration
	// OpsMax bounds the operations counted in one run. Default 1,000,000.
	OpsMax int64
	// Warmup runs the workload uncounted for this long at the start of
	// every run. Default 0 (none); negative is invalid.
	Warmup time.Duration
	// LoadConcurrency is the number of workers of Load. Default 32.
	LoadConcurrency int
	// Seed makes key choices and values repeatable. Default 1.
	Seed uint64
	// Progress, if set, receives a progress line (ending in \r) every
	// ProgressInterval during a run.
	Progress         io.Writer
	ProgressInterval time.Duration // default 1s
}

// ConcurrencyMax bounds the workers of one run.
const ConcurrencyMax = 4096

// valuePoolBytes is the size of the random pool values are sliced from.
const valuePoolBytes = 1 << 20

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.ValueBytes == 0 {
		o.ValueBytes = 256
	}
	if o.Keys == 0 {
		o.Keys = 10_000
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.OpsMax == 0 {
		o.OpsMax = 1_000_000
	}
	if o.LoadConcurrency == 0 {
		o.LoadConcurrency = 32
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.ProgressInterval == 0 {
		o.ProgressInterval = time.Second
	}
}

// Validate rejects impossible settings.
func (o *Options) Validate() error {
	switch {
	case o.ValueBytes < 0:
		return fmt.Errorf("kvbench: value bytes %d is negative", o.ValueBytes)
	case o.Keys < 1:
		return fmt.Errorf("kvbench: keys %d, need at least 1", o.Keys)
	case o.Duration <= 0 || o.OpsMax <= 0:
		return fmt.Errorf("kvbench: duration %v and ops max %d must be positive", o.Duration, o.OpsMax)
	case o.Warmup < 0:
		return fmt.Errorf("kvbench: warmup %v is negative", o.Warmup)
	case o.LoadConcurrency < 1 || o.LoadConcurrency > ConcurrencyMax:
		return fmt.Errorf("kvbench: load concurrency %d not in [1, %d]", o.LoadConcurrency, ConcurrencyMax)
	}
	return nil
}

// Result is one run: one workload at one concurrency.
type Result struct {
	ReadPercent int
	Concurrency int
	// Ops counts completed calls (Reads + Writes) in the measured time.
	Ops, Reads, Writes int64
	// Errors counts failed calls; FirstError is the first one's message.
	Errors     int64
	FirstError string
	// NotFound counts Gets that found no value (zero after Load).
	NotFound int64
	// Elapsed is the measured time (Options.Duration, or less if OpsMax
	// was reached first).
	Elapsed time.Duration
	// All, Read and Write are the latencies of successful calls.
	All, Read, Write latency.Snapshot
	// ProcessCPU is the CPU time (user + system) this whole process used
	// during the measured time: the client's, and the nodes' too when the
	// cluster runs in this process. 0 where the platform cannot tell.
	ProcessCPU time.Duration
	// OtherCPU is the CPU time the rest of the machine used during the
	// measured time (bench.SystemBusyCPU less ProcessCPU); -1 where the
	// platform cannot tell.
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

// OpsPerSecond is completed calls per second of measured time.
func (r Result) OpsPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// WorkloadName names a read percentage: "put", "get", or "mix 50% get".
func WorkloadName(readPercent int) string {
	switch readPercent {
	case 0:
		return "put"
	case 100:
		return "get"
	}
	return fmt.Sprintf("mix %d%% get", readPercent)
}

// Key returns the key of index i: one byte of a hash of i (to spread the
// keys over ranges split by first byte), then "kvbench/" and i.
func Key(i int) []byte {
	h := splitmix64(uint64(i))
	return fmt.Appendf([]byte{byte(h >> 56)}, "kvbench/%08d", i)
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// values hands out value-sized slices of one random pool. The slices are
// only read (by the client, while marshalling), never written.
type values struct {
	pool []byte
	size int
}

func newValues(size int, seed uint64) *values {
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	pool := make([]byte, max(valuePoolBytes, 2*size))
	for i := range pool {
		pool[i] = byte(rng.Uint32())
	}
	return &values{pool: pool, size: size}
}

func (v *values) pick(rng *rand.Rand) []byte {
	off := rng.IntN(len(v.pool) - v.size + 1)
	return v.pool[off : off+v.size : off+v.size]
}

// Load writes every key once with LoadConcurrency workers.
func Load(ctx context.Context, kv KV, o Options) error {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return err
	}
	vals := newValues(o.ValueBytes, o.Seed)
	var next atomic.Int64
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for w := 0; w < o.LoadConcurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(o.Seed, uint64(w)))
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= o.Keys {
					return
				}
				if err := kv.Put(ctx, Key(i), vals.pick(rng)); err != nil {
					cancel(fmt.Errorf("kvbench: loading key %d: %w", i, err))
					return
				}
			}
		}(w)
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

// Run runs one workload: concurrency workers, each choosing a key
// uniformly and then a Get with probability readPercent/100, else a Put.
func Run(ctx context.Context, kv KV, o Options, readPercent, concurrency int) (Result, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	if readPercent < 0 || readPercent > 100 {
		return Result{}, fmt.Errorf("kvbench: read percent %d not in [0, 100]", readPercent)
	}
	if concurrency < 1 || concurrency > ConcurrencyMax {
		return Result{}, fmt.Errorf("kvbench: concurrency %d not in [1, %d]", concurrency, ConcurrencyMax)
	}
	vals := newValues(o.ValueBytes, o.Seed)
	res := Result{ReadPercent: readPercent, Concurrency: concurrency}

	var (
		all, reads, writes, window latency.Recorder
		// measuring is set when the warmup ends; ops, nReads, nWrites,
		// errs and notFound count only calls started after it.
		measuring                           atomic.Bool
		ops, nReads, nWrites, errs, missing atomic.Int64
		firstErr                            atomic.Pointer[string]
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(o.Seed^uint64(readPercent)<<32, uint64(concurrency)<<20|uint64(w)))
			for runCtx.Err() == nil {
				k := Key(rng.IntN(o.Keys))
				read := rng.IntN(100) < readPercent
				counted := measuring.Load()
				start := time.Now()
				var err error
				found := true
				if read {
					_, found, err = kv.Get(runCtx, k)
				} else {
					err = kv.Put(runCtx, k, vals.pick(rng))
				}
				d := time.Since(start)
				if runCtx.Err() != nil {
					return // the run ended during this call: neither an op nor a failure
				}
				if !counted {
					continue
				}
				if err != nil {
					if errs.Add(1) == 1 {
						msg := err.Error()
						firstErr.Store(&msg)
					}
					continue
				}
				if read && !found {
					missing.Add(1)
				}
				all.Record(d)
				if o.Progress != nil {
					window.Record(d)
				}
				if read {
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
	start, cpuStart := time.Now(), processCPU()
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
				fmt.Fprintf(o.Progress, "  %-12s c=%-4d %5.1fs  %8.0f ops/s  p50 %7.2fms  p99 %7.2fms  ops %8d  errors %d   \r",
					WorkloadName(readPercent), concurrency, now.Sub(start).Seconds(),
					float64(n-prevOps)/now.Sub(prevAt).Seconds(), Millis(s.P50), Millis(s.P99), n, errs.Load())
				prevOps, prevAt = n, now
			}
		}
	}
	// Throughput counts the calls completed by now over the time measured
	// so far; calls still in flight are cancelled and not counted (a call
	// that completes after this instant would inflate the rate).
	res.Elapsed, res.ProcessCPU = time.Since(start), processCPU()-cpuStart
	res.OtherCPU = -1
	if sysEnd, ok := bench.SystemBusyCPU(); ok && sysOK {
		// The two clocks tick differently (/proc/stat in 10ms steps):
		// a small negative difference means none.
		res.OtherCPU = max(0, sysEnd-sysStart-res.ProcessCPU)
	}
	stop()
	wg.Wait()
	// Counted once every worker has stopped, so that Reads + Writes = Ops
	// (at most one call per worker completes between the two instants).
	res.Ops, res.Reads, res.Writes = ops.Load(), nReads.Load(), nWrites.Load()
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	res.Errors, res.NotFound = errs.Load(), missing.Load()
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
