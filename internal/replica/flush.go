package replica

import (
	"errors"

	"github.com/canopy-db/canopy/internal/storage"
)

// FlushObserver is an optional interface of a StateMachine. Flushed is
// called, on the applying worker, right after a batch of applied entries
// has been committed to the engine, with the index of the batch's last
// entry, and before the proposers of those entries learn their results.
//
// Why this order: an observer that publishes what the entries wrote
// (kvserver's rangefeeds) then does so only for data a reader of the
// engine can see, and before a proposer that waits for its command (and
// holds back a closed timestamp until then) goes on. Flushed must not
// block.
type FlushObserver interface {
	Flushed(index uint64)
}

// LoadAppliedIndex returns the applied index of rangeID as recorded in r
// (an engine snapshot: the index its data is current with). The applied
// index moves in the same engine batch as the entries' writes, so a
// snapshot's data and its applied index agree. 0 if none is recorded.
func LoadAppliedIndex(r storage.Reader, rangeID uint64) (uint64, error) {
	v, err := r.Get(storage.RangeLocalKey(rangeID, storage.SuffixApplied))
	if errors.Is(err, storage.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	index, _, err := decodeIndexTerm(v)
	return index, err
}
