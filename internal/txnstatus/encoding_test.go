package txnstatus

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"testing"
	"testing/quick"

	"github.com/canopy-db/canopy/internal/keys"
)

func mustTickets(t testing.TB, pq, np uint64) Encoding {
	t.Helper()
	e, err := NewTickets(pq, np)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func encodings(t testing.TB) []Encoding {
	return []Encoding{NewV1(), mustTickets(t, 0, 0), mustTickets(t, 1000, 10), mustTickets(t, 7, 7), mustTickets(t, 1, 1)}
}

// The record's v1 table: 20 -> 33, 28 -> 42, 37 -> aborted, 3141592 -> 3141595.
func TestV1RecordTable(t *testing.T) {
	e := NewV1()
	for _, tc := range []struct {
		start, commit uint64
		key, value    string
	}{
		{20, 33, "14", "21"},
		{28, 42, "1c", "2a"},
		{37, Aborted, "25", "ff80ffffffffffffffff"},
		{3141592, 3141595, "e02fefd8", "e02fefdb"},
	} {
		if got := hex.EncodeToString(e.Key(tc.start)); got != tc.key {
			t.Errorf("key(%d) = %s, want %s", tc.start, got, tc.key)
		}
		v, err := e.EncodeValue(tc.start, tc.commit)
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(v); got != tc.value {
			t.Errorf("value(%d, %d) = %s, want %s", tc.start, tc.commit, got, tc.value)
		}
	}
}

func TestRoundTripQuick(t *testing.T) {
	for _, e := range encodings(t) {
		f := func(start, delta uint64, s1, s2 uint8, aborted bool) bool {
			start >>= s1 % 64
			delta >>= s2 % 64
			commit := Aborted
			if !aborted {
				if delta == 0 || delta > math.MaxUint64-1-start {
					return true // not a valid pair; see TestEncodeValueRejects
				}
				commit = start + delta
			}
			got, err := e.StartTs(e.Key(start))
			if err != nil || got != start {
				t.Logf("%s: StartTs(Key(%d)) = %d, %v", e.Name(), start, got, err)
				return false
			}
			v, err := e.EncodeValue(start, commit)
			if err != nil {
				t.Logf("%s: EncodeValue(%d, %d): %v", e.Name(), start, commit, err)
				return false
			}
			c, ab, err := e.DecodeValue(start, v)
			if err != nil || c != commit || ab != aborted {
				t.Logf("%s: DecodeValue(%d, %x) = %d, %v, %v; want %d", e.Name(), start, v, c, ab, err, commit)
				return false
			}
			return true
		}
		if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
			t.Errorf("%s: %v", e.Name(), err)
		}
	}
}

func TestEncodeValueRejects(t *testing.T) {
	for _, e := range encodings(t) {
		for _, tc := range []struct{ start, commit uint64 }{{10, 10}, {10, 9}, {math.MaxUint64, 1}} {
			if _, err := e.EncodeValue(tc.start, tc.commit); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%s: EncodeValue(%d, %d) = %v, want ErrInvalidArgument", e.Name(), tc.start, tc.commit, err)
			}
		}
	}
	if _, err := NewV1().EncodeValue(1, math.MaxUint64); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("v1 accepted its aborted marker as a commit_ts: %v", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	tk := mustTickets(t, 0, 0)
	for _, tc := range []struct {
		e     Encoding
		start uint64
		value string
	}{
		{NewV1(), 20, "14"},   // commit == start
		{NewV1(), 20, "13"},   // commit < start
		{NewV1(), 20, ""},     // v1 has no empty value
		{NewV1(), 20, "2100"}, // trailing byte
		{tk, 20, "00"},        // delta 0
		{tk, math.MaxUint64 - 1, "02"},
		{tk, 20, "80"}, // truncated
	} {
		v, _ := hex.DecodeString(tc.value)
		if _, _, err := tc.e.DecodeValue(tc.start, v); !errors.Is(err, ErrCorruption) {
			t.Errorf("%s: DecodeValue(%d, %s) = %v, want ErrCorruption", tc.e.Name(), tc.start, tc.value, err)
		}
	}
	for _, tc := range []struct {
		e   Encoding
		key string
	}{
		{NewV1(), ""},
		{NewV1(), "8001"},
		{tk, ""},
		{tk, "0000000000000000"},                     // no column
		{tk, "000000000000000000ff"},                 // trailing byte
		{tk, "0000000000000000d7d783"},               // column 1,562,499, the last: fine, see below
		{tk, "0000000000000000d7d784"},               // column 1,562,500 == PQ/NP: out of range
		{tk, "ffffffffffffffff00"},                   // row 2^64-1: timestamp beyond 64 bits
		{mustTickets(t, 7, 7), "000000000000000001"}, // column 1 >= PQ/NP = 1
	} {
		k, _ := hex.DecodeString(tc.key)
		_, err := tc.e.StartTs(k)
		if tc.key == "0000000000000000d7d783" {
			if err != nil {
				t.Errorf("%s: StartTs(%s) = %v", tc.e.Name(), tc.key, err)
			}
			continue
		}
		if !errors.Is(err, ErrCorruption) {
			t.Errorf("%s: StartTs(%s) = %v, want ErrCorruption", tc.e.Name(), tc.key, err)
		}
	}
}

func TestNewTicketsValidates(t *testing.T) {
	for _, tc := range []struct{ pq, np uint64 }{{10, 3}, {16, 32}, {0, 3}, {5, 0}} {
		if _, err := NewTickets(tc.pq, tc.np); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("NewTickets(%d, %d) = %v, want ErrInvalidArgument", tc.pq, tc.np, err)
		}
	}
	if e := mustTickets(t, 0, 0).(tickets); e.pq != 25_000_000 || e.np != 16 {
		t.Errorf("defaults: %+v", e)
	}
}

// The plain twin of Row/Column: walk timestamps 0, 1, 2, ... with an
// odometer over the record's 3-tuple (P, C, O2), O2 turning fastest, C
// (= O1/NP) next, P slowest; no division. row = P*NP + O2, column = C.
func TestTicketsFormulasOdometer(t *testing.T) {
	for _, cfg := range []struct{ pq, np uint64 }{{1, 1}, {6, 2}, {6, 3}, {6, 6}, {12, 4}, {100, 10}, {1000, 1}} {
		var p, c, o2 uint64
		for ts := uint64(0); ts < 5*cfg.pq+3; ts++ {
			row, col := Row(ts, cfg.pq, cfg.np), Column(ts, cfg.pq, cfg.np)
			if row != p*cfg.np+o2 || col != c {
				t.Fatalf("pq=%d np=%d ts=%d: row,col = %d,%d; twin %d,%d", cfg.pq, cfg.np, ts, row, col, p*cfg.np+o2, c)
			}
			back, err := StartTsFromRowColumn(row, col, cfg.pq, cfg.np)
			if err != nil || back != ts {
				t.Fatalf("pq=%d np=%d: StartTsFromRowColumn(%d, %d) = %d, %v; want %d", cfg.pq, cfg.np, row, col, back, err, ts)
			}
			if o2++; o2 == cfg.np {
				o2 = 0
				if c++; c == cfg.pq/cfg.np {
					c = 0
					p++
				}
			}
		}
	}
}

// For large timestamps, compare with the 3-tuple twin: ts = P*PQ + O1 + O2
// with O2 < NP, O1 a multiple of NP below PQ. Also check that the tuple
// order is the timestamp order (the record's order-preserving bijection).
func TestTicketsFormulasQuick(t *testing.T) {
	type tuple struct{ p, o1, o2 uint64 }
	const pq, np = DefaultPartitioningQuantum, DefaultRowsPerQuantum
	toTuple := func(ts uint64) tuple {
		p := ts / pq
		rem := ts - p*pq
		o2 := rem & (np - 1) // np is a power of two here: a different route than %
		return tuple{p, rem - o2, o2}
	}
	less := func(a, b tuple) bool {
		if a.p != b.p {
			return a.p < b.p
		}
		if a.o1 != b.o1 {
			return a.o1 < b.o1
		}
		return a.o2 < b.o2
	}
	f := func(a, b uint64) bool {
		ta := toTuple(a)
		if Row(a, pq, np) != ta.p*np+ta.o2 || Column(a, pq, np)*np != ta.o1 {
			return false
		}
		if back, err := StartTsFromRowColumn(Row(a, pq, np), Column(a, pq, np), pq, np); err != nil || back != a {
			return false
		}
		return less(ta, toTuple(b)) == (a < b)
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 20000}); err != nil {
		t.Fatal(err)
	}
}

// Within one row, keys sort by column, i.e. by start_ts: a row is range
// scannable.
func TestTicketsColumnOrderWithinRowQuick(t *testing.T) {
	e := mustTickets(t, 0, 0)
	const pq, np = DefaultPartitioningQuantum, DefaultRowsPerQuantum
	f := func(base uint64, c1, c2 uint32) bool {
		rowStart := (base / pq) * pq // first ts of a partition; add the row offset
		rowStart += base % np
		if rowStart > math.MaxUint64-pq {
			return true
		}
		a := rowStart + uint64(c1)%(pq/np)*np
		b := rowStart + uint64(c2)%(pq/np)*np
		ka, kb := e.Key(a), e.Key(b)
		if !bytes.Equal(ka[:rowBytes], kb[:rowBytes]) {
			t.Logf("%d and %d in different rows", a, b)
			return false
		}
		c := bytes.Compare(ka, kb)
		return (a < b) == (c < 0) && (a == b) == (c == 0)
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 20000}); err != nil {
		t.Fatal(err)
	}
}

// Consecutive start timestamps spread: any NP consecutive timestamps have
// NP distinct leading key bytes, and with the table pre-split into NP
// ranges (keys.StatusSplitKeys) they land on NP distinct ranges. v1 puts them
// all on one.
func TestTicketsSpreadsConsecutiveTimestamps(t *testing.T) {
	e := mustTickets(t, 0, 0)
	const np = int(DefaultRowsPerQuantum)
	splits := keys.StatusSplitKeys(np)
	rangeOf := func(k []byte) int {
		i := 0
		for i < len(splits) && bytes.Compare(k, splits[i]) >= 0 {
			i++
		}
		return i
	}
	f := func(base uint64) bool {
		base >>= 4 // stay clear of the end of the timestamp space
		leading := map[byte]bool{}
		ranges := map[int]bool{}
		for i := range uint64(np) {
			k := keys.StatusKey(e.Key(base + i))
			leading[k[len(keys.StatusPrefix)]] = true
			ranges[rangeOf(k)] = true
		}
		return len(leading) == np && len(ranges) == np
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
	// The baseline does not spread: 16 consecutive realistic timestamps, one range.
	v1Ranges := map[int]bool{}
	for i := range uint64(np) {
		v1Ranges[rangeOf(keys.StatusKey(NewV1().Key(1<<58+i)))] = true
	}
	if len(v1Ranges) != 1 {
		t.Errorf("v1 spread over %d ranges; the baseline is expected to hotspot", len(v1Ranges))
	}
}

// The record's size claims: with PQ = 25,000,000 and NP = 16 a column is
// below 1,562,500 and fits in 3 bytes, so a key is at most 11 bytes; an
// aborted value is empty; a small commit delta takes 1-3 bytes where v1
// takes 9 bytes for realistic oracle timestamps (and 10 for aborted).
func TestTicketsSizes(t *testing.T) {
	const pq, np = DefaultPartitioningQuantum, DefaultRowsPerQuantum
	if max := pq/np - 1; max != 1_562_499 || VarLongLen(max) != 3 {
		t.Fatalf("largest column %d takes %d bytes", max, VarLongLen(max))
	}
	e := mustTickets(t, 0, 0)
	const start = uint64(1_763_776_000_000) << 18 // an oracle timestamp in 2025
	for _, ts := range []uint64{0, pq - 1, start, start + pq - 1, math.MaxUint64} {
		if n := len(e.Key(ts)); n > rowBytes+3 {
			t.Errorf("tickets key of %d is %d bytes", ts, n)
		}
	}
	for _, tc := range []struct {
		delta uint64
		bytes int
	}{{1, 1}, {127, 1}, {1 << 13, 2}, {1 << 20, 3}, {1 << 27, 4}} {
		v, err := e.EncodeValue(start, start+tc.delta)
		if err != nil || len(v) != tc.bytes {
			t.Errorf("tickets value for delta %d: %d bytes, %v; want %d", tc.delta, len(v), err, tc.bytes)
		}
	}
	if v, _ := e.EncodeValue(start, Aborted); len(v) != 0 {
		t.Errorf("tickets aborted value %x, want empty", v)
	}
	if v, _ := NewV1().EncodeValue(start, start+1); len(v) != 9 {
		t.Errorf("v1 value of a realistic timestamp is %d bytes", len(v))
	}
	if v, _ := NewV1().EncodeValue(start, Aborted); len(v) != 10 {
		t.Errorf("v1 aborted value is %d bytes", len(v))
	}
}

// v1 keys sort in timestamp order (range scans are plain); tickets keys do
// not, and StartTs recovers each timestamp from a scan in key order.
func TestV1KeyOrderQuick(t *testing.T) {
	e := NewV1()
	f := func(a, b uint64) bool {
		return (a < b) == (bytes.Compare(e.Key(a), e.Key(b)) < 0)
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}
