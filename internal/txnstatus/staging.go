package txnstatus

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// STAGING: the status-table extension of parallel commits
// (docs/design-notes.md, "Parallel commits and the STAGING record").
//
// A transaction's final status stays where it was: Key(start_ts), written
// only by put-unless-exists with EncodeValue's bytes, so both encodings'
// status values, and every reader of them, are unchanged. Beside it, at
// StagingKey, one put-unless-exists writes either
//
//   - STAGING (the coordinator): the commit timestamp and the in-flight
//     writes W (key, value hash). The transaction is implicitly committed
//     once this record won its key and every write of W is in place; or
//   - FENCE (a reader about to abort a transaction whose heartbeat
//     expired): no STAGING record can be written any more, so the abort
//     cannot race with an implicit commit.
//
// Layout of the staging key: the encoding's key plus StagingSuffix. Both
// encodings' keys end in a VarLong, which is prefix-free, so a staging key
// is never a status key, and it sorts right after its transaction's
// status key (the same tickets row). StartTs of a staging key fails
// (ErrCorruption); StagingStartTs inverts StagingKey.
//
// Layout of the staging value (both encodings):
//
//	byte   stagingFormat (1)
//	byte   kind: 1 STAGING, 2 FENCE
//	STAGING only:
//	  uvarint commit_ts - start_ts (> 0)
//	  uvarint n (<= StagedWritesMax), then n times:
//	    uvarint key length, key, 8-byte big-endian value hash
const (
	StagingSuffix byte = 0x00
	stagingFormat byte = 1
	kindStaging   byte = 1
	kindFence     byte = 2
)

// StagedWritesMax bounds the writes of one STAGING record (the client's
// TxnKeysMax is lower).
const StagedWritesMax = 1 << 16

// StagedWrite is one in-flight write of a STAGING record: the key and the
// rpcpb.IntentValueHash of its value.
type StagedWrite struct {
	Key       []byte
	ValueHash uint64
}

// Staging is a decoded staging value: Fence, or a STAGING record.
type Staging struct {
	Fence    bool
	CommitTs uint64
	Writes   []StagedWrite
}

// StagingKey returns the staging key of startTs (without keys.StatusPrefix,
// like Key).
func StagingKey(enc Encoding, startTs uint64) []byte {
	return append(enc.Key(startTs), StagingSuffix)
}

// StagingStartTs inverts StagingKey. It returns an error wrapping
// ErrCorruption for any key StagingKey cannot produce (a status key
// included).
func StagingStartTs(enc Encoding, key []byte) (uint64, error) {
	if len(key) == 0 || key[len(key)-1] != StagingSuffix {
		return 0, fmt.Errorf("%w: %x is not a staging key", ErrCorruption, key)
	}
	ts, err := enc.StartTs(key[:len(key)-1])
	if err != nil {
		return 0, err
	}
	if !bytes.Equal(enc.Key(ts), key[:len(key)-1]) {
		return 0, fmt.Errorf("%w: %x is not a staging key", ErrCorruption, key)
	}
	return ts, nil
}

// FenceValue is the staging value of a fence.
func FenceValue() []byte { return []byte{stagingFormat, kindFence} }

// EncodeStaging encodes a STAGING record of startTs. commitTs must be above
// startTs and the writes at most StagedWritesMax (else ErrInvalidArgument).
func EncodeStaging(startTs, commitTs uint64, ws []StagedWrite) ([]byte, error) {
	if commitTs <= startTs {
		return nil, fmt.Errorf("%w: staging commit_ts %d is not above start_ts %d", ErrInvalidArgument, commitTs, startTs)
	}
	if len(ws) > StagedWritesMax {
		return nil, fmt.Errorf("%w: %d staged writes, above StagedWritesMax %d", ErrInvalidArgument, len(ws), StagedWritesMax)
	}
	b := []byte{stagingFormat, kindStaging}
	b = binary.AppendUvarint(b, commitTs-startTs)
	b = binary.AppendUvarint(b, uint64(len(ws)))
	for _, w := range ws {
		b = binary.AppendUvarint(b, uint64(len(w.Key)))
		b = append(b, w.Key...)
		b = binary.BigEndian.AppendUint64(b, w.ValueHash)
	}
	return b, nil
}

// DecodeStaging decodes a staging value of startTs. Bytes EncodeStaging or
// FenceValue cannot produce give an error wrapping ErrCorruption.
func DecodeStaging(startTs uint64, v []byte) (Staging, error) {
	bad := func(what string) (Staging, error) {
		return Staging{}, fmt.Errorf("%w: staging value of start_ts %d: %s", ErrCorruption, startTs, what)
	}
	if len(v) < 2 || v[0] != stagingFormat {
		return bad("unknown format")
	}
	switch v[1] {
	case kindFence:
		if len(v) != 2 {
			return bad("fence with trailing bytes")
		}
		return Staging{Fence: true}, nil
	case kindStaging:
	default:
		return bad(fmt.Sprintf("unknown kind %d", v[1]))
	}
	rest := v[2:]
	next := func() (uint64, bool) {
		x, n := binary.Uvarint(rest)
		if n <= 0 {
			return 0, false
		}
		rest = rest[n:]
		return x, true
	}
	delta, ok := next()
	if !ok || delta == 0 || delta > math.MaxUint64-startTs {
		return bad("commit timestamp")
	}
	s := Staging{CommitTs: startTs + delta}
	n, ok := next()
	if !ok || n > StagedWritesMax {
		return bad("write count")
	}
	for range n {
		kl, ok := next()
		if !ok || kl > uint64(len(rest)) || uint64(len(rest))-kl < 8 {
			return bad("write")
		}
		w := StagedWrite{Key: bytes.Clone(rest[:kl]), ValueHash: binary.BigEndian.Uint64(rest[kl : kl+8])}
		rest = rest[kl+8:]
		s.Writes = append(s.Writes, w)
	}
	if len(rest) != 0 {
		return bad("trailing bytes")
	}
	return s, nil
}
