package eval

import (
	"os"
	"sync/atomic"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
)

// Put writes a committed version outside any transaction, at the batch's
// write timestamp (Context.WriteTs). An intent at the key, or a version at
// or above the timestamp, is a conflict; so is, on a 2pc-locking cluster
// (Context.SharedLocks), a transaction's replicated shared lock.
func init() {
	register(rpcpb.MethodPut, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			add(pointSpan(ru.GetPut().GetKey(), concurrency.Write))
		},
		EvalWrite: evalPut,
	})
}

func evalPut(c Context, rw storage.ReadWriter, ru *rpcpb.RequestUnion, _ *Effects) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	p := ru.GetPut()
	if !ContainsKey(c.Desc, p.Key) {
		return nil, Mismatch(c.Desc, p.Key)
	}
	if c.WriteTs == 0 {
		return nil, rpcpb.NewError(rpcpb.ErrorCode_INTERNAL, "put without a write timestamp")
	}
	if c.SharedLocks {
		rec, err := loadKeyRecord(rw, p.Key)
		if err != nil {
			return nil, Error(err)
		}
		if other := rec.sharedBy(0); other != 0 {
			e := lockConflict(p.Key, other, true)
			e.Code = rpcpb.ErrorCode_INTENT_FOUND
			return nil, e
		}
	}
	if ks := c.KeyStates; ks != nil {
		// The key's state from the leaseholder's cache, else read.
		newest, gen, ok := ks.Known(p.Key)
		st := mvcc.NoIntentState(newest)
		if ok && verifyKeyStates.Load() {
			if e := verifyKeyState(rw, p.Key, newest); e != nil {
				return nil, e
			}
		}
		if !ok {
			var err error
			if st, err = mvcc.LoadWriteState(rw, p.Key); err != nil {
				return nil, Error(err)
			}
		}
		if err := mvcc.PutCommittedLoaded(rw, st, p.Key, p.Value, p.Delete, c.WriteTs); err != nil {
			return nil, Error(err)
		}
		// No intent, and the version the command will apply (the apply
		// raises it again: keystates.go).
		ks.Note(p.Key, c.WriteTs, gen)
	} else if err := mvcc.PutCommitted(rw, p.Key, p.Value, p.Delete, c.WriteTs); err != nil {
		return nil, Error(err)
	}
	return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_Put{Put: &rpcpb.PutResponse{Ts: c.WriteTs}}}, nil
}

// verifyKeyStates makes every Put that takes its key's state from the key
// cache read the key too and compare: a testing check (CockroachDB's
// "expensive checks"), on in the tests that mix Puts with transactions
// and, for nodes started as processes, with CANOPY_VERIFY_KEY_STATES=1.
var verifyKeyStates atomic.Bool

func init() { verifyKeyStates.Store(os.Getenv("CANOPY_VERIFY_KEY_STATES") == "1") }

// VerifyKeyStatesForTesting turns the check on or off in this process.
func VerifyKeyStatesForTesting(on bool) { verifyKeyStates.Store(on) }

// verifyKeyState reads key and checks what the cache said: no intent, and
// no committed version above newest (the cache's newest may be higher
// than the stored one: a Put notes its version before it applies, and a
// proposal may never apply).
func verifyKeyState(r storage.Reader, key []byte, newest mvcc.Timestamp) *rpcpb.Error {
	st, err := mvcc.LoadWriteState(r, key)
	if err != nil {
		return Error(err)
	}
	if st.HasIntent() || st.NewestTs() > newest {
		return rpcpb.NewError(rpcpb.ErrorCode_INTERNAL, "key cache of %q is wrong: it says no intent and newest version %d; stored: intent %v, newest version %d",
			key, newest, st.HasIntent(), st.NewestTs())
	}
	return nil
}
