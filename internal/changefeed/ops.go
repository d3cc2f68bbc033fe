package changefeed

import (
	"bytes"
	"fmt"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/storage"
)

// OpKind is what an applied command did to a user key.
type OpKind uint8

const (
	// OpIntent: an intent of the transaction started at Ts was written.
	OpIntent OpKind = iota + 1
	// OpIntentGone: the intent at Key was removed (resolved either way).
	OpIntentGone
	// OpValue: a committed version at Ts (a value, or a deletion).
	OpValue
)

func (k OpKind) String() string {
	switch k {
	case OpIntent:
		return "intent"
	case OpIntentGone:
		return "intent-gone"
	case OpValue:
		return "value"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// Op is one change of an applied command to a user key.
type Op struct {
	Kind OpKind
	// Key is the logical key (user keyspace).
	Key []byte
	// Ts: the commit timestamp (OpValue) or the start_ts (OpIntent).
	Ts      uint64
	Value   []byte
	Deleted bool
	// HeartbeatKey of the intent's transaction (OpIntent).
	HeartbeatKey []byte
}

// ReprReader walks a batch representation (storage.Engine.ReadRepr).
type ReprReader func(repr []byte, fn func(kind storage.ReprOpKind, key, value []byte) error) error

// DecodeOps returns the ops on user keys of an evaluated command's engine
// batch (rpcpb.RaftCommand.write_batch), in batch order. Writes to plain
// slots and system keys are not changes a watcher sees; a deleted version
// is version GC (never in an evaluated command). A range deletion over
// user data cannot be followed and is an error, as is a key or value that
// does not decode (wrapping storage.ErrCorruption).
func DecodeOps(read ReprReader, repr []byte) ([]Op, error) {
	var ops []Op
	userLo, userHi := mvcc.SpanBounds(keys.UserPrefix, keys.UserEnd)
	err := read(repr, func(kind storage.ReprOpKind, pk, v []byte) error {
		if kind == storage.ReprDeleteRange {
			if bytes.Compare(pk, userHi) < 0 && bytes.Compare(v, userLo) > 0 {
				return fmt.Errorf("changefeed: a command deletes the range [%x, %x) of user data", pk, v)
			}
			return nil
		}
		if len(pk) == 0 || pk[0] != storage.PrefixData {
			return nil
		}
		k, slot, ts, err := mvcc.DecodeKey(pk)
		if err != nil {
			return err
		}
		if !keys.IsUser(k) {
			return nil
		}
		switch {
		case slot == mvcc.KindVersion && kind == storage.ReprSet:
			val, del, err := mvcc.DecodeVersionValue(v)
			if err != nil {
				return err
			}
			ops = append(ops, Op{Kind: OpValue, Key: k, Ts: ts, Value: bytes.Clone(val), Deleted: del})
		case slot == mvcc.KindIntent && kind == storage.ReprSet:
			iv, err := mvcc.DecodeIntentValue(v)
			if err != nil {
				return err
			}
			ops = append(ops, Op{Kind: OpIntent, Key: k, Ts: iv.Txn.StartTs, HeartbeatKey: bytes.Clone(iv.Txn.HeartbeatKey)})
		case slot == mvcc.KindIntent && kind == storage.ReprDelete:
			ops = append(ops, Op{Kind: OpIntentGone, Key: k})
		}
		return nil
	})
	return ops, err
}
