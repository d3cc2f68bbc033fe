package replica

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/canopy-db/canopy/internal/storage"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// InitialIndex and InitialTerm are the log position at which a new range
// (bootstrap or split) starts. Every replica of a new range starts from
// the same state at this index, so no snapshot is needed to start.
const (
	InitialIndex = 10
	InitialTerm  = 5
)

// raftStorage is the raft.Storage of a replica: a MemoryStorage holding the
// log entries not yet truncated (also persisted in the engine, from which
// it is rebuilt on restart), with Snapshot overridden to build a snapshot
// of the range's current data on demand.
//
// Rejected alternative: a raft.Storage reading entries from Pebble on every
// call. It saves memory for long logs, but our logs are truncated every
// LogEntriesMax entries, and MemoryStorage is the library's tested code.
type raftStorage struct {
	*raft.MemoryStorage
	r *Replica
}

// Snapshot implements raft.Storage. It is only called inside RawNode calls,
// under the replica's raftMu, when the engine holds exactly the applied
// state.
func (s *raftStorage) Snapshot() (raftpb.Snapshot, error) {
	return s.r.makeSnapshot()
}

// persistedState is what a replica reads back at start.
type persistedState struct {
	hard        raftpb.HardState
	conf        raftpb.ConfState
	applied     uint64
	truncIndex  uint64
	truncTerm   uint64
	appliedTerm uint64
	entries     []raftpb.Entry
}

func encodeIndexTerm(index, term uint64) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, index)
	binary.BigEndian.PutUint64(b[8:], term)
	return b
}

func decodeIndexTerm(b []byte) (uint64, uint64, error) {
	if len(b) != 16 {
		return 0, 0, fmt.Errorf("replica: index/term record of %d bytes: %w", len(b), storage.ErrCorruption)
	}
	return binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:]), nil
}

// WriteInitialState writes the Raft state of a new range whose voters are
// the given replica IDs (node IDs), at InitialIndex. hard may carry the
// term and vote of an uninitialized replica that voted before the range
// was created here; they are kept so no vote is cast twice in a term.
func WriteInitialState(w storage.Writer, rangeID uint64, voters []uint64, hard raftpb.HardState) error {
	return WriteInitialConfState(w, rangeID, raftpb.ConfState{Voters: voters}, hard)
}

// WriteInitialConfState is WriteInitialState with a whole configuration
// (voters and learners, as peer IDs): the right hand side of a split has
// its left hand side's.
func WriteInitialConfState(w storage.Writer, rangeID uint64, conf raftpb.ConfState, hard raftpb.HardState) error {
	if hard.Term < InitialTerm {
		hard.Term = InitialTerm
	}
	if hard.Commit < InitialIndex {
		hard.Commit = InitialIndex
	}
	hb, err := hard.Marshal()
	if err != nil {
		return err
	}
	cb, err := conf.Marshal()
	if err != nil {
		return err
	}
	for _, kv := range []struct {
		suffix byte
		v      []byte
	}{
		{storage.SuffixHardState, hb},
		{storage.SuffixConfState, cb},
		{storage.SuffixApplied, encodeIndexTerm(InitialIndex, InitialTerm)},
		{storage.SuffixTruncated, encodeIndexTerm(InitialIndex, InitialTerm)},
	} {
		if err := w.Set(storage.RangeLocalKey(rangeID, kv.suffix), kv.v); err != nil {
			return err
		}
	}
	return nil
}

func loadState(eng storage.Reader, rangeID uint64) (persistedState, error) {
	var ps persistedState
	get := func(suffix byte) ([]byte, error) {
		v, err := eng.Get(storage.RangeLocalKey(rangeID, suffix))
		if errors.Is(err, storage.ErrNotFound) {
			return nil, nil
		}
		return v, err
	}
	if v, err := get(storage.SuffixHardState); err != nil {
		return ps, err
	} else if v != nil {
		if err := ps.hard.Unmarshal(v); err != nil {
			return ps, fmt.Errorf("replica r%d: hard state: %v: %w", rangeID, err, storage.ErrCorruption)
		}
	}
	if v, err := get(storage.SuffixConfState); err != nil {
		return ps, err
	} else if v != nil {
		if err := ps.conf.Unmarshal(v); err != nil {
			return ps, fmt.Errorf("replica r%d: conf state: %v: %w", rangeID, err, storage.ErrCorruption)
		}
	}
	var err error
	if v, e := get(storage.SuffixApplied); e != nil {
		return ps, e
	} else if v != nil {
		if ps.applied, ps.appliedTerm, err = decodeIndexTerm(v); err != nil {
			return ps, err
		}
	}
	// A HardState whose commit index alone changed is not written
	// (prepareReady), so the stored commit index may lag: every applied
	// entry was committed, so the commit index is at least the applied
	// one (and etcd raft refuses to start with applied above commit).
	ps.hard.Commit = max(ps.hard.Commit, ps.applied)
	if v, e := get(storage.SuffixTruncated); e != nil {
		return ps, e
	} else if v != nil {
		if ps.truncIndex, ps.truncTerm, err = decodeIndexTerm(v); err != nil {
			return ps, err
		}
	}
	it, err := eng.NewIter(storage.RaftLogKey(rangeID, ps.truncIndex+1), raftLogEnd(rangeID))
	if err != nil {
		return ps, err
	}
	defer it.Close()
	next := ps.truncIndex + 1
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.Value()
		if err != nil {
			return ps, err
		}
		var e raftpb.Entry
		if err := e.Unmarshal(v); err != nil {
			return ps, fmt.Errorf("replica r%d: log entry: %v: %w", rangeID, err, storage.ErrCorruption)
		}
		if e.Index != next {
			return ps, fmt.Errorf("replica r%d: log entry %d where %d was expected: %w", rangeID, e.Index, next, storage.ErrCorruption)
		}
		next++
		ps.entries = append(ps.entries, e)
	}
	return ps, it.Error()
}

// appendEntries persists entries, deleting any old entries at or after the
// first new index (a new leader may overwrite an uncommitted suffix).
func appendEntries(b *storage.Batch, rangeID uint64, entries []raftpb.Entry, prevLast uint64) error {
	if len(entries) == 0 {
		return nil
	}
	for i := range entries {
		data, err := entries[i].Marshal()
		if err != nil {
			return err
		}
		if err := b.Set(storage.RaftLogKey(rangeID, entries[i].Index), data); err != nil {
			return err
		}
	}
	last := entries[len(entries)-1].Index
	if prevLast > last {
		return b.DeleteRange(storage.RaftLogKey(rangeID, last+1), storage.RaftLogKey(rangeID, prevLast+1))
	}
	return nil
}

// raftLogEnd is the first key after every Raft log key of rangeID.
func raftLogEnd(rangeID uint64) []byte {
	return storage.RangeLocalKey(rangeID, storage.SuffixRaftLog+1)
}

// PersistedInfo is a replica's Raft state as stored, for inspection.
type PersistedInfo struct {
	HardState  raftpb.HardState
	ConfState  raftpb.ConfState
	Applied    uint64
	Truncated  uint64
	LastIndex  uint64
	LogEntries int
}

// Inspect reads a replica's persisted Raft state from an engine (the node
// should be stopped, or the answer is a moving target).
func Inspect(eng storage.Reader, rangeID uint64) (PersistedInfo, error) {
	ps, err := loadState(eng, rangeID)
	if err != nil {
		return PersistedInfo{}, err
	}
	last := ps.truncIndex
	if n := len(ps.entries); n > 0 {
		last = ps.entries[n-1].Index
	}
	return PersistedInfo{HardState: ps.hard, ConfState: ps.conf, Applied: ps.applied,
		Truncated: ps.truncIndex, LastIndex: last, LogEntries: len(ps.entries)}, nil
}
