package kvbench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
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
	// ServerPIDs are the processes of a cluster running outside this
	// process (say, three etcd members started by a script). If set, each
	// run measures their CPU time over its measured time
	// (bench.ProcessesCPU) into Result.ServerCPU, and a run fails if one
	// of them cannot be read. At most ServerPIDsMax.
	ServerPIDs []int
	// Measured, if set, is called as the measured time starts (true) and
	// as it ends (false), where ProcessCPU is read: a caller's own
	// counters read there cover the calls counted in Result.Ops.
	Measured func(start bool)
}

// ServerPIDsMax bounds Options.ServerPIDs.
const ServerPIDsMax = 64

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
	case len(o.ServerPIDs) > ServerPIDsMax:
		return fmt.Errorf("kvbench: %d server processes, at most %d", len(o.ServerPIDs), ServerPIDsMax)
	}
	for _, pid := range o.ServerPIDs {
		if pid <= 0 {
			return fmt.Errorf("kvbench: server process id %d is not positive", pid)
		}
	}
	return nil
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
func Key(i int) []byte { return KeyIn("kvbench", i) }

// KeyIn returns the key of index i in keyspace space: one byte of a hash
// of i, then space, "/" and i. Keys of different spaces never collide.
func KeyIn(space string, i int) []byte {
	h := splitmix64(uint64(i))
	return fmt.Appendf([]byte{byte(h >> 56)}, "%s/%08d", space, i)
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Values hands out value-sized slices of one random pool. The slices are
// only read (by the client, while marshalling), never written.
type Values struct {
	pool []byte
	size int
}

// NewValues returns a pool of random values of size bytes.
func NewValues(size int, seed uint64) *Values {
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	pool := make([]byte, max(valuePoolBytes, 2*size))
	for i := range pool {
		pool[i] = byte(rng.Uint32())
	}
	return &Values{pool: pool, size: size}
}

// Pick returns a slice of the pool of the values' size, chosen with rng.
// The caller must not write into it.
func (v *Values) Pick(rng *rand.Rand) []byte {
	off := rng.IntN(len(v.pool) - v.size + 1)
	return v.pool[off : off+v.size : off+v.size]
}

// Load writes every key once with LoadConcurrency workers.
func Load(ctx context.Context, kv KV, o Options) error {
	o.EnsureDefaults()
	vals := NewValues(o.ValueBytes, o.Seed)
	return LoadKeys(ctx, kv, o, Key, func(_ int, rng *rand.Rand) []byte { return vals.Pick(rng) })
}

// LoadKeys writes key(i) = value(i, rng) for every i in [0, o.Keys) with
// o.LoadConcurrency workers, each with its own rng. It stops at the first
// failure and returns it.
func LoadKeys(ctx context.Context, kv KV, o Options, key func(i int) []byte, value func(i int, rng *rand.Rand) []byte) error {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return err
	}
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
				if err := kv.Put(ctx, key(i), value(i, rng)); err != nil {
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
