package eval

import (
	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// Prepare is 2pc-locking's first phase at one range
// (docs/design-notes.md, "The 2PC + locking baseline"): the transaction's
// intents for its writes, and a replicated shared lock (the key record's
// shared list) for each key it read and does not write, in one batch.
// Success is the range's yes vote.
//
// Evaluation checks storage only; the leaseholder has already checked,
// under the same latches, that the transaction still holds the in-memory
// shared lock of each read key (kvserver/twopc_path.go). Conflicts, all
// WRITE_CONFLICT naming the other transaction in intents, so that the
// leaseholder waits for it in its lock table and the client resolves it
// by its status: another transaction's intent at a written or read key, or
// its replicated shared lock at a written key. A committed version newer
// than start_ts is no conflict (mvcc.PutIntentLocked). A write refused by
// a recovery is refused here too. Rewriting is idempotent: a Prepare sent
// again after an ambiguous reply writes the same intents and locks.
func init() {
	register(rpcpb.MethodPrepare, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			p := ru.GetPrepare()
			for _, w := range p.GetWrites() {
				add(pointSpan(w.GetKey(), concurrency.Write))
			}
			// Write latches on read keys too: their key records change.
			for _, k := range p.GetReads() {
				add(pointSpan(k, concurrency.Write))
			}
		},
		EvalWrite: evalPrepare,
	})
}

func evalPrepare(c Context, rw storage.ReadWriter, ru *rpcpb.RequestUnion, fx *Effects) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	p := ru.GetPrepare()
	txn := mvcc.TxnMeta{StartTs: p.GetTxn().GetStartTs(), HeartbeatKey: p.GetTxn().GetHeartbeatKey()}
	if txn.StartTs == 0 {
		return nil, rpcpb.NewError(rpcpb.ErrorCode_INVALID_ARGUMENT, "Prepare without a transaction start timestamp")
	}
	if len(p.GetWrites()) == 0 && len(p.GetReads()) == 0 {
		return nil, rpcpb.NewError(rpcpb.ErrorCode_INVALID_ARGUMENT, "Prepare with no key")
	}
	written := make(map[string]bool, len(p.GetWrites()))
	for _, w := range p.GetWrites() {
		if !ContainsKey(c.Desc, w.GetKey()) {
			return nil, Mismatch(c.Desc, w.GetKey())
		}
		if w.GetDelete() && len(w.GetValue()) != 0 {
			return nil, rpcpb.NewError(rpcpb.ErrorCode_INVALID_ARGUMENT, "Prepare: delete of %q with a %d-byte value", w.GetKey(), len(w.GetValue()))
		}
		if written[string(w.GetKey())] {
			return nil, rpcpb.NewError(rpcpb.ErrorCode_INVALID_ARGUMENT, "Prepare writes key %q twice", w.GetKey())
		}
		written[string(w.GetKey())] = true
		rec, err := loadKeyRecord(rw, w.GetKey())
		if err != nil {
			return nil, Error(err)
		}
		if rec.refuses(txn.StartTs) {
			return nil, rpcpb.NewError(rpcpb.ErrorCode_WRITE_CONFLICT, "write of transaction %d at %q was refused (a recovery found it missing)", txn.StartTs, w.GetKey())
		}
		if other := rec.sharedBy(txn.StartTs); other != 0 {
			return nil, lockConflict(w.GetKey(), other, true)
		}
		if err := mvcc.PutIntentLocked(rw, w.GetKey(), w.GetValue(), w.GetDelete(), txn); err != nil {
			return nil, Error(err)
		}
		// Our own shared lock, if we read the key before, is now the
		// intent's exclusive lock.
		if rec.unshare(txn.StartTs) {
			if err := storeKeyRecord(rw, w.GetKey(), rec); err != nil {
				return nil, Error(err)
			}
		}
		fx.Locked = append(fx.Locked, Lock{Key: w.GetKey(), Txn: txn.StartTs, Strength: concurrency.Exclusive})
	}
	for _, k := range p.GetReads() {
		if written[string(k)] {
			continue // the intent's lock covers the read
		}
		if !ContainsKey(c.Desc, k) {
			return nil, Mismatch(c.Desc, k)
		}
		in, found, err := mvcc.GetIntent(rw, k)
		if err != nil {
			return nil, Error(err)
		}
		if found && in.Txn.StartTs != txn.StartTs {
			return nil, lockConflict(k, in.Txn.StartTs, false)
		}
		rec, err := loadKeyRecord(rw, k)
		if err != nil {
			return nil, Error(err)
		}
		if err := rec.share(txn.StartTs); err != nil {
			return nil, Error(err)
		}
		if err := storeKeyRecord(rw, k, rec); err != nil {
			return nil, Error(err)
		}
		fx.Locked = append(fx.Locked, Lock{Key: k, Txn: txn.StartTs, Strength: concurrency.Shared})
	}
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_Prepare{Prepare: &rpcpb.PrepareResponse{}}}, nil
}

// lockConflict is the WRITE_CONFLICT of a Prepare that met another
// transaction's lock at key.
func lockConflict(key []byte, holder uint64, shared bool) *rpcpb.Error {
	what := "an intent"
	if shared {
		what = "a shared lock"
	}
	e := rpcpb.NewError(rpcpb.ErrorCode_WRITE_CONFLICT, "transaction %d holds %s at %q", holder, what, key)
	e.Intents = []*rpcpb.Intent{{Key: key, Txn: &rpcpb.TxnMeta{StartTs: holder, HeartbeatKey: keys.HeartbeatKey(holder)}, Shared: shared}}
	return e
}
