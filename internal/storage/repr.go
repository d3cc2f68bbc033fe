package storage

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// ReprOpKind is the kind of one operation of a batch representation.
type ReprOpKind uint8

const (
	// ReprSet sets Key to Value.
	ReprSet ReprOpKind = iota + 1
	// ReprDelete deletes Key.
	ReprDelete
	// ReprDeleteRange deletes [Key, Value).
	ReprDeleteRange
)

// ReadRepr calls fn, in order, with every operation of repr (from
// Batch.Repr): Set values under PrefixData in their user form (the inline
// tag removed), other values as stored. The slices are valid only during
// the call. A repr that does not decode, or holds a data value that is not
// inline (Repr never produces one), is ErrCorruption; an error from fn
// stops the walk and is returned as is.
//
// It is how a leaseholder's rangefeed learns what an applied command wrote
// (internal/changefeed), without a second encoding of the same writes.
func (e *Engine) ReadRepr(repr []byte, fn func(kind ReprOpKind, key, value []byte) error) error {
	src := e.db.NewBatch()
	defer src.Close()
	if err := src.SetRepr(append([]byte(nil), repr...)); err != nil {
		return fmt.Errorf("storage: batch representation: %v: %w", err, ErrCorruption)
	}
	r := src.Reader()
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			return fmt.Errorf("storage: batch representation: %v: %w", err, ErrCorruption)
		}
		if !ok {
			return nil
		}
		switch kind {
		case pebble.InternalKeyKindSet:
			if isDataKey(k) {
				if len(v) == 0 || v[0] != tagInline {
					return fmt.Errorf("storage: batch representation: data value of %q not inline: %w", k, ErrCorruption)
				}
				v = v[1:]
			}
			err = fn(ReprSet, k, v)
		case pebble.InternalKeyKindDelete, pebble.InternalKeyKindDeleteSized:
			err = fn(ReprDelete, k, nil)
		case pebble.InternalKeyKindRangeDelete:
			err = fn(ReprDeleteRange, k, v)
		default:
			return fmt.Errorf("storage: batch representation: operation kind %v: %w", kind, ErrCorruption)
		}
		if err != nil {
			return err
		}
	}
}
