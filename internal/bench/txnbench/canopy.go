package txnbench

import (
	"context"
	"fmt"

	"github.com/canopy-db/canopy/client"
)

// Canopy runs the transfers as Canopy transactions: client.DB.Txn, whose
// closure reads both keys with Txn.Get, one after the other, and writes
// both with Txn.Put (serializable; DB.Txn retries a lost conflict with
// backoff, at most Options.TxnAttemptsMax runs). Put and Get (Load and
// Check) are the DB's single-key calls.
type Canopy struct{ *client.DB }

// Transfer implements Store.
func (c Canopy) Transfer(ctx context.Context, from, to []byte, amount int64) (attempts int, err error) {
	err = c.DB.Txn(ctx, func(ctx context.Context, txn *client.Txn) error {
		attempts++
		fv, ok, err := txn.Get(ctx, from)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("txnbench: key %q is missing", from)
		}
		tv, ok, err := txn.Get(ctx, to)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("txnbench: key %q is missing", to)
		}
		nf, nt, err := Moved(fv, tv, amount)
		if err != nil {
			return err
		}
		if err := txn.Put(ctx, from, nf); err != nil {
			return err
		}
		return txn.Put(ctx, to, nt)
	})
	return attempts, err
}
