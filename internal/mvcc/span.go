package mvcc

import (
	"bytes"
	"fmt"

	"github.com/canopy-db/canopy/internal/storage"
)

// ClearSpan removes every physical key (plain, intents, versions) of the
// logical keys in [start, end), with one range deletion; an empty end
// means the end of the keyspace. A replica calls it before it applies a
// snapshot of the span.
func ClearSpan(w storage.Writer, start, end []byte) error {
	if len(end) != 0 && bytes.Compare(start, end) > 0 {
		return invalidf("clear span: start %q > end %q", start, end)
	}
	lo, hi := SpanBounds(start, end)
	if err := w.DeleteRange(lo, hi); err != nil {
		return fmt.Errorf("mvcc: clear span [%q, %q): %w", start, end, err)
	}
	return nil
}

// IterateSpan calls fn with every physical key and its stored value in the
// logical span [start, end), in order; an empty end means the end of the
// keyspace. It is the raw view a snapshot sends: a receiver writes the
// pairs back unchanged with Set. Both slices are valid only during the
// call. An error from fn stops the iteration and is returned as is.
func IterateSpan(r storage.Reader, start, end []byte, fn func(physicalKey, value []byte) error) (err error) {
	it, err := spanIter(r, "iterate span", start, end)
	if err != nil {
		return err
	}
	defer closeIter(it, &err)
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.Value()
		if err != nil {
			return fmt.Errorf("mvcc: iterate span: read %x: %w", it.Key(), err)
		}
		if err := fn(it.Key(), v); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("mvcc: iterate span [%q, %q): %w", start, end, err)
	}
	return nil
}
