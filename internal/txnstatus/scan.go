package txnstatus

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// Range scans of the status table by start-timestamp interval (the
// record's principle RS: "supports range scans without needing to read the
// entire table and post-filter it"), for debug txns and backup.
//
// ScanSpans plans the key spans to read; ScanInterval reads them through a
// caller's reader, keeps the keys of the interval and joins each
// transaction's status and staging records into one Record. The reader is
// the only I/O: the client passes a PlainScan over the cluster's ranges,
// tests a sorted slice, so the planner and the filter are tested against a
// plain model (scan_test.go).
//
// v1: keys sort by start_ts, so [from, to) is one span, exactly.
//
// tickets: a row holds the timestamps P*PQ + c*NP + O2 for c in [0, PQ/NP),
// in column order, and rows are bit reversed, so the interval is one span
// per row of each partition it meets, NP spans per partition, each exact.
// An interval that meets more than RowSpansMax/NP partitions is read as the
// whole table instead and filtered: bit reversal scatters the rows of
// consecutive partitions over the keyspace, so many spans would cost one
// request each for a few keys. With the defaults (PQ 25,000,000, NP 16,
// 18 logical bits per millisecond) a partition is about 95 ms of start
// timestamps, so exact spans cover intervals up to about 6 s.

// RowSpansMax bounds the spans ScanSpans returns for a tickets interval;
// above it the plan is the whole table, filtered.
const RowSpansMax = 1024

// Span is a key span [Start, End) of the status table, without
// keys.StatusPrefix. A nil Start is the table's first key, a nil End its
// end.
type Span struct {
	Start, End []byte
}

// ScanSpans returns the spans, in key order and disjoint, that hold the
// status and staging keys of every start_ts in [from, to) (none if from >=
// to). exact reports whether they hold no other keys; when it is false,
// the plan reads the whole table and the caller must filter (ScanInterval
// does).
func ScanSpans(enc Encoding, from, to uint64) (spans []Span, exact bool) {
	if from >= to {
		return nil, true
	}
	switch e := enc.(type) {
	case v1:
		// VarLong is order preserving and prefix-free, so a staging key
		// Key(ts)+0x00 sorts before Key(ts+1) <= Key(to).
		return []Span{{Start: e.Key(from), End: e.Key(to)}}, true
	case tickets:
		return e.scanSpans(from, to)
	}
	return []Span{{}}, false
}

func (t tickets) scanSpans(from, to uint64) ([]Span, bool) {
	pFirst, pLast := from/t.pq, (to-1)/t.pq
	if pLast-pFirst >= RowSpansMax/t.np {
		return []Span{{}}, false
	}
	cols := t.pq / t.np
	var spans []Span
	for p := pFirst; ; p++ {
		for o2 := range t.np {
			// The row's timestamps are base + c*np, c in [0, cols). In
			// the last partition of the 64-bit space, base may not fit:
			// that row holds no timestamp.
			if p*t.pq > math.MaxUint64-o2 {
				continue
			}
			base := p*t.pq + o2
			cFrom, cTo := columnsFrom(base, from, t.np), columnsFrom(base, to, t.np)
			if t.mix {
				// A row's timestamp in column c is somewhere in the
				// column's block [p*pq + c*np, +np): take every block
				// that meets the interval (the caller filters).
				pbase := p * t.pq
				cFrom, cTo = 0, columnsFrom(pbase, to, t.np)
				if from > pbase {
					cFrom = (from - pbase) / t.np
				}
			}
			cTo = min(cTo, cols)
			if cFrom >= cTo {
				continue
			}
			row := make([]byte, rowBytes)
			binary.BigEndian.PutUint64(row, bits.Reverse64(p*t.np+o2))
			spans = append(spans, Span{
				Start: AppendVarLong(bytes.Clone(row), cFrom),
				End:   AppendVarLong(row, cTo),
			})
		}
		if p == pLast {
			break
		}
	}
	slices.SortFunc(spans, func(a, b Span) int { return bytes.Compare(a.Start, b.Start) })
	return spans, !t.mix
}

// columnsFrom returns the first column c with base + c*np >= ts: 0 when
// base >= ts, else ceil((ts-base)/np).
func columnsFrom(base, ts, np uint64) uint64 {
	if base >= ts {
		return 0
	}
	d := ts - base
	return d/np + min(d%np, 1)
}

// Record is what the status table holds for one transaction: its decision
// (status key) and its staging record, each possibly absent.
type Record struct {
	StartTs uint64
	// Decided: the status key holds a decision: Aborted, or CommitTs.
	Decided  bool
	Aborted  bool
	CommitTs uint64
	// HasStaging: the staging key holds Staging (a STAGING record or a
	// FENCE; see staging.go).
	HasStaging bool
	Staging    Staging
}

// ReadSpanFunc reads the status-table keys of span in key order (keys
// without keys.StatusPrefix), calling fn for each; it stops at fn's first
// error and returns it.
type ReadSpanFunc func(span Span, fn func(key, value []byte) error) error

// ScanInterval reads the records of the start timestamps in [from, to),
// planned by ScanSpans, and calls fn for each transaction that has a
// status or a staging record: in start_ts order for v1, row by row for
// tickets (in start_ts order within a row). A key that is neither a status
// nor a staging key, or a value that does not decode, ends the scan with
// an error wrapping ErrCorruption. fn's error ends it too, returned as is.
func ScanInterval(enc Encoding, from, to uint64, read ReadSpanFunc, fn func(Record) error) error {
	return ScanSchedule(NewSchedule(enc, math.MaxUint64), from, to, read, fn)
}

// ScanSchedule is ScanInterval over a schedule: [from, to) is cut by the
// schedule's eras and each piece is planned and read with its era's
// encoding, era by era. The table then holds keys of several encodings,
// and a span planned for one may meet keys of another: a key is taken as
// the record of the first era (in schedule order) whose encoding reads it
// as a status or staging key of a timestamp of that era, and skipped by
// the other eras' pieces. That owner is the only one whose transaction can
// have begun: a later era's timestamp whose key reads as an earlier era's
// is refused at Begin (Schedule.Collides). A key no era reads ends the
// scan with an error wrapping ErrCorruption.
func ScanSchedule(s Schedule, from, to uint64, read ReadSpanFunc, fn func(Record) error) error {
	for i, era := range s.Eras {
		lo, hi := max(from, era.From), to
		if i+1 < len(s.Eras) {
			hi = min(hi, s.Eras[i+1].From)
		}
		if lo >= hi {
			continue
		}
		if err := scanEra(s, i, lo, hi, read, fn); err != nil {
			return err
		}
	}
	return nil
}

func scanEra(s Schedule, era int, from, to uint64, read ReadSpanFunc, fn func(Record) error) error {
	enc := s.Eras[era].Encoding
	spans, _ := ScanSpans(enc, from, to)
	for _, sp := range spans {
		var cur Record
		have := false
		flush := func() error {
			if !have {
				return nil
			}
			have = false
			return fn(cur)
		}
		err := read(sp, func(key, value []byte) error {
			owner, ts, staging, err := ownerOfKey(s, key)
			if err != nil {
				return err
			}
			if owner != era || ts < from || ts >= to {
				return nil
			}
			if !have || cur.StartTs != ts {
				if err := flush(); err != nil {
					return err
				}
				cur, have = Record{StartTs: ts}, true
			}
			if staging {
				st, err := DecodeStaging(ts, value)
				if err != nil {
					return err
				}
				cur.HasStaging, cur.Staging = true, st
				return nil
			}
			c, aborted, err := enc.DecodeValue(ts, value)
			if err != nil {
				return err
			}
			cur.Decided, cur.Aborted, cur.CommitTs = true, aborted, c
			return nil
		})
		if err != nil {
			return err
		}
		if err := flush(); err != nil {
			return err
		}
	}
	return nil
}

// Owner returns the era whose encoding holds key (a status or staging key,
// without keys.StatusPrefix), the start timestamp it encodes there and
// whether it is a staging key: the first era whose encoding reads key as
// the key of a timestamp of that era, the only one whose transaction can
// have begun (Collides). The answer is final only for a timestamp up to
// ValidThrough: a later version of the schedule may add an era above it.
func (s Schedule) Owner(key []byte) (era int, ts uint64, staging bool, err error) {
	return ownerOfKey(s, key)
}

// ownerOfKey returns the first era whose encoding reads key as a status or
// staging key of a timestamp of that era. With one era, that is the
// encoding's reading of the key, whatever the timestamp.
func ownerOfKey(s Schedule, key []byte) (era int, ts uint64, staging bool, err error) {
	var first error
	for i, e := range s.Eras {
		ts, staging, err := startTsOfKey(e.Encoding, key)
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		if len(s.Eras) == 1 || s.era(ts) == i {
			return i, ts, staging, nil
		}
	}
	if first == nil {
		first = fmt.Errorf("%w: status table key %x is no era's key", ErrCorruption, key)
	}
	return -1, 0, false, first
}

// startTsOfKey decodes a status-table key: a status key, or (staging) a
// staging key. A key that is neither gives an error wrapping
// ErrCorruption.
func startTsOfKey(enc Encoding, key []byte) (ts uint64, staging bool, err error) {
	ts, err = enc.StartTs(key)
	if err == nil {
		return ts, false, nil
	}
	if ts, serr := StagingStartTs(enc, key); serr == nil {
		return ts, true, nil
	}
	if !errors.Is(err, ErrCorruption) {
		err = fmt.Errorf("%w: %w", ErrCorruption, err)
	}
	return 0, false, fmt.Errorf("status table key %x: %w", key, err)
}
