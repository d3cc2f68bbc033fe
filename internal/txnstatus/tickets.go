package txnstatus

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// Defaults of the tickets encoding, the record's choice for Cassandra: each
// row holds at most PQ/NP = 1,562,500 timestamps, so a column takes at most
// 3 bytes as a VarLong.
const (
	DefaultPartitioningQuantum uint64 = 25_000_000
	DefaultRowsPerQuantum      uint64 = 16
)

// rowBytes is the length of a tickets row key: a fixed 8-byte big-endian
// number. The record rejects a variable-length row because its bit-reversed
// forms are not amenable to range scans.
const rowBytes = 8

// tickets is the record's tickets encoding (AtlasDB _transactions2).
//
// The timestamp space is cut into partitions of PQ timestamps; each
// partition has NP rows, and consecutive timestamps go round-robin over
// them:
//
//	row    = (ts / PQ) * NP + (ts % PQ) % NP
//	column = (ts % PQ) / NP
//	key    = bigEndian64(bits.Reverse64(row)) + VarLong(column)
//	value  = VarLong(commit_ts - start_ts) if committed, empty if aborted
//
// The row is bit reversed so that its fastest-varying low bits (ts % NP)
// become the key's top bits: NP consecutive start timestamps land on NP
// different leading bytes, hence on different ranges once the table is
// pre-split at keys.StatusSplitKeys. Values are deltas because a commit
// timestamp is usually a little above its start timestamp.
//
// Invariant: NP > 0 and NP divides PQ, so (P, O1, O2) with O1 = column*NP,
// O2 = row%NP is an order-preserving bijection with ts (see the record).
type tickets struct {
	pq uint64 // partitioning quantum: timestamps per partition
	np uint64 // rows per partition (quantum)
	// mix: the row offset (ts%pq)%np is XORed with (ts>>MixShift)%np, the
	// low bits of the timestamp's millisecond (NewTicketsMix).
	mix bool
}

// MixShift is where tickets-mix takes the bits it mixes into the row
// offset: the oracle's default LogicalBits, so that they are the low bits
// of the timestamp's wall-clock millisecond.
const MixShift = 18

// NewTicketsMix returns "tickets-mix": the tickets layout with the row
// offset of ts XORed with (ts >> MixShift) % NP. The record's tickets
// assume dense counter timestamps, whose low bits are uniform; Canopy's
// are milliseconds << 18 plus a counter that restarts every millisecond,
// so at a few hundred transactions a second most start timestamps end in
// small numbers and tickets puts a third of them in one of 16 status
// ranges (docs/BENCHMARKS.md, "Hot spots"). The millisecond's low bits
// move evenly with time, and the XOR spreads each offset over every row.
//
// It is a bijection that keeps partitions and columns: NP must be a power
// of two dividing 2^MixShift, so that the NP timestamps of one column of a
// partition (an NP-aligned block) share their millisecond bits, and the
// XOR only permutes the block's rows. Rows still hold their timestamps in
// column order; a range scan reads whole boundary columns and filters.
func NewTicketsMix(partitioningQuantum, rowsPerQuantum uint64) (Encoding, error) {
	e, err := NewTickets(partitioningQuantum, rowsPerQuantum)
	if err != nil {
		return nil, err
	}
	t := e.(tickets)
	if t.np&(t.np-1) != 0 || t.np > 1<<MixShift {
		return nil, fmt.Errorf("%w: tickets-mix needs rows per quantum a power of two up to 2^%d, not %d", ErrInvalidArgument, MixShift, t.np)
	}
	t.mix = true
	return t, nil
}

// IsTickets reports whether enc has the tickets layout (a row and a
// column): tickets or tickets-mix.
func IsTickets(enc Encoding) bool {
	_, ok := enc.(tickets)
	return ok
}

// row is the row of ts: Row, with the offset mixed for tickets-mix.
func (t tickets) row(ts uint64) uint64 {
	r := Row(ts, t.pq, t.np)
	if t.mix {
		r ^= (ts >> MixShift) % t.np
	}
	return r
}

// startTs inverts row and Column.
func (t tickets) startTs(row, column uint64) (uint64, error) {
	ts, err := StartTsFromRowColumn(row, column, t.pq, t.np)
	if err != nil || !t.mix {
		return ts, err
	}
	// ts is in the NP-aligned block of its column; the block shares the
	// mixed bits, so XORing them again gives the offset back.
	return ts ^ ((ts >> MixShift) % t.np), nil
}

// NewTickets returns the tickets encoding with the given partitioning
// quantum (PQ) and rows per quantum (NP). Zero means the default
// (DefaultPartitioningQuantum, DefaultRowsPerQuantum). It returns
// ErrInvalidArgument unless NP divides PQ.
func NewTickets(partitioningQuantum, rowsPerQuantum uint64) (Encoding, error) {
	if partitioningQuantum == 0 {
		partitioningQuantum = DefaultPartitioningQuantum
	}
	if rowsPerQuantum == 0 {
		rowsPerQuantum = DefaultRowsPerQuantum
	}
	if partitioningQuantum%rowsPerQuantum != 0 {
		return nil, fmt.Errorf("%w: tickets rows per quantum %d does not divide partitioning quantum %d",
			ErrInvalidArgument, rowsPerQuantum, partitioningQuantum)
	}
	return tickets{pq: partitioningQuantum, np: rowsPerQuantum}, nil
}

// Row is the tickets row of ts: (ts/pq)*np + (ts%pq)%np. It never overflows
// when np <= pq (row <= ts). np must be > 0 and divide pq.
func Row(ts, pq, np uint64) uint64 { return (ts/pq)*np + (ts%pq)%np }

// Column is the tickets column of ts: (ts%pq)/np, always < pq/np.
func Column(ts, pq, np uint64) uint64 { return (ts % pq) / np }

// StartTsFromRowColumn inverts Row and Column: P = row/np, O1 = column*np,
// O2 = row%np, ts = P*pq + O1 + O2. It returns an error wrapping
// ErrCorruption if column >= pq/np or the timestamp would exceed 64 bits,
// as no timestamp maps there.
func StartTsFromRowColumn(row, column, pq, np uint64) (uint64, error) {
	if column >= pq/np {
		return 0, fmt.Errorf("%w: tickets column %d out of range [0, %d)", ErrCorruption, column, pq/np)
	}
	p, o1, o2 := row/np, column*np, row%np
	hi, base := bits.Mul64(p, pq)
	if hi != 0 || base > math.MaxUint64-o1-o2 { // o1+o2 < pq: no overflow
		return 0, fmt.Errorf("%w: tickets row %d column %d exceed 64 bits", ErrCorruption, row, column)
	}
	return base + o1 + o2, nil
}

func (t tickets) Name() string {
	if t.mix {
		return "tickets-mix"
	}
	return "tickets"
}

func (t tickets) Key(startTs uint64) []byte {
	col := Column(startTs, t.pq, t.np)
	key := make([]byte, rowBytes, rowBytes+VarLongLen(col))
	binary.BigEndian.PutUint64(key, bits.Reverse64(t.row(startTs)))
	return AppendVarLong(key, col)
}

func (t tickets) StartTs(key []byte) (uint64, error) {
	if len(key) < rowBytes+1 {
		return 0, fmt.Errorf("%w: tickets key %x too short", ErrCorruption, key)
	}
	row := bits.Reverse64(binary.BigEndian.Uint64(key[:rowBytes]))
	col, err := decodeWholeVarLong(key[rowBytes:])
	if err != nil {
		return 0, fmt.Errorf("tickets key column: %w", err)
	}
	return t.startTs(row, col)
}

func (t tickets) EncodeValue(startTs, commitTs uint64) ([]byte, error) {
	if err := checkCommitTs(startTs, commitTs); err != nil {
		return nil, err
	}
	if commitTs == Aborted {
		return []byte{}, nil
	}
	return AppendVarLong(nil, commitTs-startTs), nil
}

func (t tickets) DecodeValue(startTs uint64, v []byte) (uint64, bool, error) {
	if len(v) == 0 {
		return Aborted, true, nil
	}
	delta, err := decodeWholeVarLong(v)
	if err != nil {
		return 0, false, fmt.Errorf("tickets value of start_ts %d: %w", startTs, err)
	}
	if delta == 0 || delta > math.MaxUint64-startTs {
		return 0, false, fmt.Errorf("%w: tickets value of start_ts %d holds delta %d", ErrCorruption, startTs, delta)
	}
	return startTs + delta, false, nil
}

// Cell is one cell of the tickets layout: a row and a column key. A tickets
// key is Row followed by Column.
type Cell struct {
	Row    []byte
	Column []byte
}

// SplitTicketsKey splits a tickets key (without keys.StatusPrefix) into its
// row (8 bytes) and column (one VarLong). It returns an error wrapping
// ErrCorruption for any other shape. The returned slices alias key.
func SplitTicketsKey(key []byte) (Cell, error) {
	if len(key) < rowBytes+1 {
		return Cell{}, fmt.Errorf("%w: tickets key %x too short", ErrCorruption, key)
	}
	if _, err := decodeWholeVarLong(key[rowBytes:]); err != nil {
		return Cell{}, fmt.Errorf("tickets key column: %w", err)
	}
	return Cell{Row: key[:rowBytes:rowBytes], Column: key[rowBytes:]}, nil
}
