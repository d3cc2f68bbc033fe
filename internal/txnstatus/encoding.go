package txnstatus

import (
	"errors"
	"fmt"
	"math"
)

// Aborted is the commit timestamp that means "aborted" in Go APIs. Real
// commit timestamps come from the oracle and are always > start_ts > 0.
const Aborted uint64 = 0

var (
	// ErrInvalidArgument is returned for arguments no correct caller passes:
	// a commit timestamp not above the start timestamp, a bad configuration.
	ErrInvalidArgument = errors.New("txnstatus: invalid argument")
	// ErrCorruption is returned when stored bytes cannot have been written by
	// the encoding that reads them. It is distinct from ErrInvalidArgument so
	// that callers can tell a bad request from bad data.
	ErrCorruption = errors.New("txnstatus: corruption")
)

// Encoding maps the status table's logical content, start_ts -> commit_ts or
// aborted, to keys and values. Implementations are stateless and safe for
// concurrent use.
type Encoding interface {
	// Name identifies the encoding ("v1", "tickets") in configuration,
	// metrics and benchmark output.
	Name() string
	// Key returns the key (WITHOUT keys.StatusPrefix; callers add it via
	// keys.StatusKey) for startTs.
	Key(startTs uint64) []byte
	// EncodeValue encodes commitTs for startTs. commitTs is Aborted (0) or
	// greater than startTs; anything else returns ErrInvalidArgument.
	EncodeValue(startTs, commitTs uint64) ([]byte, error)
	// DecodeValue inverts EncodeValue. It returns (Aborted, true, nil) for
	// an aborted transaction, (commitTs, false, nil) with commitTs > startTs
	// for a committed one, and an error wrapping ErrCorruption otherwise.
	DecodeValue(startTs uint64, v []byte) (commitTs uint64, aborted bool, err error)
	// StartTs inverts Key (for range scans and backup). It returns an error
	// wrapping ErrCorruption for bytes Key cannot produce.
	StartTs(key []byte) (uint64, error)
}

func checkCommitTs(startTs, commitTs uint64) error {
	if commitTs != Aborted && commitTs <= startTs {
		return fmt.Errorf("%w: commit_ts %d is not above start_ts %d", ErrInvalidArgument, commitTs, startTs)
	}
	return nil
}

// v1 is the record's original encoding: key = VarLong(start_ts), value =
// VarLong(commit_ts), aborted = VarLong(-1), that is VarLong(2^64-1), ten
// bytes (0xff80ffffffffffffffff, as in the record's table).
//
// Keys sort in start_ts order, so consecutive transactions write adjacent
// keys and all land on one range: the hotspot tickets removes. It is kept as
// the baseline for the status-table experiments.
type v1 struct{}

// v1AbortedValue is the commit timestamp v1 stores for an aborted
// transaction: -1 as a Java long, i.e. 2^64-1. It is never a real commit
// timestamp (EncodeValue rejects it).
const v1AbortedValue = math.MaxUint64

// NewV1 returns the record's v1 encoding.
func NewV1() Encoding { return v1{} }

func (v1) Name() string { return "v1" }

func (v1) Key(startTs uint64) []byte { return AppendVarLong(nil, startTs) }

func (v1) StartTs(key []byte) (uint64, error) {
	ts, err := decodeWholeVarLong(key)
	if err != nil {
		return 0, fmt.Errorf("v1 key: %w", err)
	}
	return ts, nil
}

func (v1) EncodeValue(startTs, commitTs uint64) ([]byte, error) {
	if err := checkCommitTs(startTs, commitTs); err != nil {
		return nil, err
	}
	if commitTs == Aborted {
		return AppendVarLong(nil, v1AbortedValue), nil
	}
	if commitTs == v1AbortedValue {
		return nil, fmt.Errorf("%w: commit_ts %d is v1's aborted marker", ErrInvalidArgument, commitTs)
	}
	return AppendVarLong(nil, commitTs), nil
}

func (v1) DecodeValue(startTs uint64, v []byte) (uint64, bool, error) {
	commitTs, err := decodeWholeVarLong(v)
	if err != nil {
		return 0, false, fmt.Errorf("v1 value of start_ts %d: %w", startTs, err)
	}
	if commitTs == v1AbortedValue {
		return Aborted, true, nil
	}
	if commitTs <= startTs {
		return 0, false, fmt.Errorf("%w: v1 value of start_ts %d holds commit_ts %d", ErrCorruption, startTs, commitTs)
	}
	return commitTs, false, nil
}
