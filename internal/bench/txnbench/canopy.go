package txnbench

import (
	"context"
	"fmt"

	"github.com/canopy-db/canopy/client"
)

// Canopy runs the transfers as Canopy transactions: client.DB.Txn, whose
// closure reads both keys with Txn.Get, one after the other, and writes
// both (serializable; DB.Txn retries a lost conflict with backoff, at most
// Options.TxnAttemptsMax runs). Put and Get (Load and Check) are the DB's
// single-key calls.
//
// WritesAtCommit hands both writes to the commit (Txn.CommitWith, as etcd's
// transfer puts both keys in its commit Txn): one request and one Raft
// proposal when both keys lie in one range and one-phase commit is on,
// else both writes at once and then the commit. Without it the closure
// writes with two Txn.Puts, one after the other, and DB.Txn commits (the
// transfers of the runs before 2026-11-27, session 17).
type Canopy struct {
	*client.DB
	WritesAtCommit bool
}

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
		if c.WritesAtCommit {
			return txn.CommitWith(ctx, client.Write{Key: from, Value: nf}, client.Write{Key: to, Value: nt})
		}
		if err := txn.Put(ctx, from, nf); err != nil {
			return err
		}
		return txn.Put(ctx, to, nt)
	})
	return attempts, err
}
