package eval

import (
	"bytes"

	"github.com/canopy-db/canopy/internal/concurrency"
	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/rpc/rpcpb"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/canopy-db/canopy/internal/txnstatus"
)

// PlainPutUnlessExists writes an unversioned key only if it has no value;
// otherwise it returns the existing value. It is the status table's commit
// point (I1): exactly one of a transaction's commit and its abort wins.
//
// At a staging key (parallel commits: a status key plus 0x00, see
// StagingStatusKey) whose status key holds a decision, nothing is written
// and the answer is a FENCE, as if a reader had fenced the key: once a
// transaction is decided, no STAGING record of it may be written any more.
// This is what lets status-table GC delete the STAGING and FENCE records
// of decided transactions (docs/design-notes.md, "GC of the records
// parallel commits and 1PC leave"): a late or resent STAGING put finds the
// decision in place of the fence it would have met.
func init() {
	register(rpcpb.MethodPlainPutUnlessExists, &Command{
		Declare: func(ru *rpcpb.RequestUnion, _ *rpcpb.RangeDescriptor, add func(concurrency.LatchSpan)) {
			k := ru.GetPlainPutUnlessExists().GetKey()
			if IsStatusScheduleKey(k) {
				declareStatusSchedule(add) // status_schedule.go
				return
			}
			add(pointSpan(k, concurrency.Write))
			if sk, ok := StagingStatusKey(k); ok {
				add(pointSpan(sk, concurrency.Read))
			}
		},
		EvalWrite: evalPlainPutUnlessExists,
	})
}

// StagingStatusKey returns the status key of key if key has the shape of
// a staging key: under keys.StatusPrefix, at least one byte after it, and
// ending in txnstatus.StagingSuffix. Only the status key's presence tells
// a staging key from a status key that happens to end in that byte: the
// status keys of both encodings are prefix-free (they end in a VarLong),
// so a status key's key less its last byte is never a status key, and so
// never holds a value.
func StagingStatusKey(key []byte) ([]byte, bool) {
	if !bytes.HasPrefix(key, keys.StatusPrefix) || len(key) < len(keys.StatusPrefix)+2 || key[len(key)-1] != txnstatus.StagingSuffix {
		return nil, false
	}
	return key[:len(key)-1], true
}

func evalPlainPutUnlessExists(c Context, rw storage.ReadWriter, ru *rpcpb.RequestUnion, _ *Effects) (*rpcpb.ResponseUnion, *rpcpb.Error) {
	p := ru.GetPlainPutUnlessExists()
	if !ContainsKey(c.Desc, p.Key) {
		return nil, Mismatch(c.Desc, p.Key)
	}
	answer := func(ok bool, existing []byte) (*rpcpb.ResponseUnion, *rpcpb.Error) {
		return &rpcpb.ResponseUnion{Value: &rpcpb.ResponseUnion_PlainPutUnlessExists{PlainPutUnlessExists: &rpcpb.PlainPutUnlessExistsResponse{Succeeded: ok, Existing: existing}}}, nil
	}
	if IsStatusScheduleKey(p.Key) {
		return evalStatusSchedulePut(c, rw, p) // status_schedule.go
	}
	if sk, ok := StagingStatusKey(p.Key); ok {
		existing, found, err := mvcc.GetPlain(rw, p.Key)
		if err != nil {
			return nil, Error(err)
		}
		if found {
			return answer(false, existing)
		}
		if _, decided, err := mvcc.GetPlain(rw, sk); err != nil {
			return nil, Error(err)
		} else if decided {
			return answer(false, txnstatus.FenceValue())
		}
	}
	ok, existing, err := mvcc.PutPlainUnlessExists(rw, p.Key, p.Value)
	if err != nil {
		return nil, Error(err)
	}
	return answer(ok, existing)
}
