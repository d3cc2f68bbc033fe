// Package bank is the bank-transfer workload: accounts whose balances move
// between one another in serializable transactions. Whatever the failures,
// the total never changes (I1, I2, I3): Total checks it.
package bank

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/canopy-db/canopy/client"
	"github.com/canopy-db/canopy/internal/bench/latency"
)

// Options configure the workload. Zero fields take defaults.
type Options struct {
	Accounts       int   // default 1000
	InitialBalance int64 // default 1000
	// Prefix of the account keys (default "acct/").
	Prefix string
	// SetupBatch is how many accounts one setup transaction writes
	// (default 100).
	SetupBatch int
}

func (o *Options) ensureDefaults() {
	if o.Accounts == 0 {
		o.Accounts = 1000
	}
	if o.InitialBalance == 0 {
		o.InitialBalance = 1000
	}
	if o.Prefix == "" {
		o.Prefix = "acct/"
	}
	if o.SetupBatch == 0 {
		o.SetupBatch = 100
	}
}

// Bank runs the workload against a client.
type Bank struct {
	opts      Options
	db        *client.DB
	Latency   latency.Recorder
	transfers atomic.Int64
	failures  atomic.Int64
}

// New returns a bank over db.
func New(db *client.DB, opts Options) *Bank {
	opts.ensureDefaults()
	return &Bank{opts: opts, db: db}
}

// Key returns account i's key.
func (b *Bank) Key(i int) []byte { return []byte(fmt.Sprintf("%s%06d", b.opts.Prefix, i)) }

// Want is the total every check must find.
func (b *Bank) Want() int64 { return int64(b.opts.Accounts) * b.opts.InitialBalance }

func encode(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func decode(v []byte) (int64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("bank: balance of %d bytes", len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

// Setup writes every account with the initial balance.
func (b *Bank) Setup(ctx context.Context) error {
	for lo := 0; lo < b.opts.Accounts; lo += b.opts.SetupBatch {
		hi := min(lo+b.opts.SetupBatch, b.opts.Accounts)
		err := b.db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
			for i := lo; i < hi; i++ {
				if err := txn.Put(ctx, b.Key(i), encode(b.opts.InitialBalance)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("bank setup: %w", err)
		}
	}
	return nil
}

// Transfer moves a random amount between two random accounts in one
// serializable transaction.
func (b *Bank) Transfer(ctx context.Context, rng *rand.Rand) error {
	from := rng.IntN(b.opts.Accounts)
	to := rng.IntN(b.opts.Accounts - 1)
	if to >= from {
		to++
	}
	start := time.Now()
	err := b.db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		fv, ok, err := txn.Get(ctx, b.Key(from))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("bank: account %d missing", from)
		}
		tv, ok, err := txn.Get(ctx, b.Key(to))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("bank: account %d missing", to)
		}
		fb, err := decode(fv)
		if err != nil {
			return err
		}
		tb, err := decode(tv)
		if err != nil {
			return err
		}
		amount := int64(0)
		if fb > 0 {
			amount = 1 + rng.Int64N(min(fb, 100))
		}
		if err := txn.Put(ctx, b.Key(from), encode(fb-amount)); err != nil {
			return err
		}
		return txn.Put(ctx, b.Key(to), encode(tb+amount))
	})
	if err != nil {
		if ctx.Err() == nil {
			b.failures.Add(1)
		}
		return err
	}
	b.Latency.Record(time.Since(start))
	b.transfers.Add(1)
	return nil
}

// Counts returns the transfers committed and the transfers that failed
// (gave up after retries, or ended ambiguous).
func (b *Bank) Counts() (committed, failed int64) { return b.transfers.Load(), b.failures.Load() }

// Balances reads every account in one transaction (a consistent snapshot).
func (b *Bank) Balances(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	err := b.db.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		clear(out)
		end := []byte(b.opts.Prefix + "\xff")
		kvs, err := txn.Scan(ctx, []byte(b.opts.Prefix), end, b.opts.Accounts+1)
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			v, err := decode(kv.Value)
			if err != nil {
				return err
			}
			out[string(kv.Key)] = v
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) != b.opts.Accounts {
		return out, fmt.Errorf("bank: found %d accounts, want %d", len(out), b.opts.Accounts)
	}
	return out, nil
}

// ErrTotalChanged is returned by Check when money appeared or vanished.
var ErrTotalChanged = errors.New("bank: total balance changed")

// Check reads all balances and verifies the total.
func (b *Bank) Check(ctx context.Context) (total int64, err error) {
	bal, err := b.Balances(ctx)
	if err != nil {
		return 0, err
	}
	for _, v := range bal {
		total += v
	}
	if total != b.Want() {
		return total, fmt.Errorf("%w: %d, want %d", ErrTotalChanged, total, b.Want())
	}
	return total, nil
}
