package txnbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench/kvbench"
)

// Store is a system the transfers run on.
type Store interface {
	kvbench.KV
	// Transfer moves amount from the balance of key from to the balance
	// of key to, in one transaction that reads both keys and writes both.
	// It returns how many times the transaction ran (1: no retry), also
	// when it fails; at most the store's own bound on attempts.
	Transfer(ctx context.Context, from, to []byte, amount int64) (attempts int, err error)
}

// InitialBalance is every key's balance after Load.
const InitialBalance = 1_000_000

// balanceBytes is the size of the balance at the front of every value.
const balanceBytes = 8

// WorkloadName is the workload's name in tables, CSV files and plots.
const WorkloadName = "txn"

// Key returns the key of index i (see the package comment).
func Key(i int) []byte { return kvbench.KeyIn("txnbench", i) }

// ErrTotalChanged is returned by Check when the balances no longer sum to
// Keys x InitialBalance.
var ErrTotalChanged = errors.New("txnbench: total balance changed")

// Balance decodes the balance at the front of value v.
func Balance(v []byte) (int64, error) {
	if len(v) < balanceBytes {
		return 0, fmt.Errorf("txnbench: value of %d bytes holds no balance", len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// WithBalance returns a copy of v (at least 8 bytes) whose balance is b;
// the rest of the value is kept, so the value's size does not change.
func WithBalance(v []byte, b int64) []byte {
	out := append([]byte(nil), v...)
	binary.BigEndian.PutUint64(out, uint64(b))
	return out
}

// Moved returns the new values of the two keys of a transfer of amount
// from the value fromV to the value toV.
func Moved(fromV, toV []byte, amount int64) (newFrom, newTo []byte, err error) {
	fb, err := Balance(fromV)
	if err != nil {
		return nil, nil, err
	}
	tb, err := Balance(toV)
	if err != nil {
		return nil, nil, err
	}
	return WithBalance(fromV, fb-amount), WithBalance(toV, tb+amount), nil
}

func validate(o kvbench.Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.ValueBytes < balanceBytes {
		return fmt.Errorf("txnbench: values of %d bytes cannot hold the %d-byte balance", o.ValueBytes, balanceBytes)
	}
	if o.Keys < 2 {
		return fmt.Errorf("txnbench: %d keys, a transfer needs 2", o.Keys)
	}
	return nil
}

// Load writes every key with the balance InitialBalance.
func Load(ctx context.Context, s kvbench.KV, o kvbench.Options) error {
	o.EnsureDefaults()
	if err := validate(o); err != nil {
		return err
	}
	vals := kvbench.NewValues(o.ValueBytes, o.Seed)
	return kvbench.LoadKeys(ctx, s, o, Key, func(_ int, rng *rand.Rand) []byte {
		return WithBalance(vals.Pick(rng), InitialBalance)
	})
}

// Run runs transfers of one unit between two distinct keys chosen
// uniformly, with concurrency workers.
func Run(ctx context.Context, s Store, o kvbench.Options, concurrency int) (kvbench.Result, error) {
	o.EnsureDefaults()
	if err := validate(o); err != nil {
		return kvbench.Result{}, err
	}
	return kvbench.Drive(ctx, o, kvbench.Workload{
		Name:        WorkloadName,
		ReadPercent: -1, // reads and writes: not a single-key mix
		Seed:        0x7478_6e00 << 32,
		ShowRetries: true,
		Op: func(ctx context.Context, rng *rand.Rand) kvbench.Outcome {
			from := rng.IntN(o.Keys)
			to := rng.IntN(o.Keys - 1)
			if to >= from {
				to++
			}
			attempts, err := s.Transfer(ctx, Key(from), Key(to), 1)
			return kvbench.Outcome{Retries: max(0, attempts-1), Err: err}
		},
	}, concurrency)
}

// CheckRetryMax bounds how long Check tries again a read that met a live
// transaction's intent (a transfer cut off when the run ended).
const CheckRetryMax = 30 * time.Second

// Check reads every key (o.LoadConcurrency readers) and returns the sum of
// the balances; ErrTotalChanged if it is not Keys x InitialBalance. Run it
// when no transfer is in flight: it reads key by key, not a snapshot.
//
// A transfer cut off when the run ended may still hold an intent: a read
// that meets it waits, and may be answered with a retryable conflict
// until that transaction's coordinator commits it or its heartbeat
// lapses and it is aborted. Such a read is tried again, for at most
// CheckRetryMax.
func Check(ctx context.Context, s kvbench.KV, o kvbench.Options) (total int64, err error) {
	o.EnsureDefaults()
	if err := validate(o); err != nil {
		return 0, err
	}
	var (
		next atomic.Int64
		sum  atomic.Int64
		wg   sync.WaitGroup
	)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for w := 0; w < o.LoadConcurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= o.Keys {
					return
				}
				v, ok, err := s.Get(ctx, Key(i))
				for deadline := time.Now().Add(CheckRetryMax); errors.Is(err, client.ErrRetryable) && time.Now().Before(deadline) && ctx.Err() == nil; {
					time.Sleep(100 * time.Millisecond)
					v, ok, err = s.Get(ctx, Key(i))
				}
				if err == nil && !ok {
					err = fmt.Errorf("txnbench: key %d is missing (was it loaded?)", i)
				}
				var b int64
				if err == nil {
					b, err = Balance(v)
				}
				if err != nil {
					cancel(fmt.Errorf("txnbench: checking key %d: %w", i, err))
					return
				}
				sum.Add(b)
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return 0, err
	}
	total = sum.Load()
	if want := int64(o.Keys) * InitialBalance; total != want {
		return total, fmt.Errorf("%w: %d, want %d", ErrTotalChanged, total, want)
	}
	return total, nil
}
