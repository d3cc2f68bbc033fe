package txnstatus

import (
	"bytes"
	"errors"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"sort"
	"testing"
	"testing/quick"
)

// scanModel is a status table held as a plain map, and the same table as
// the sorted keys and values a store would hold.
type scanModel struct {
	enc     Encoding
	records map[uint64]Record
	keys    [][]byte
	values  [][]byte
	// reads counts the keys a scan read outside its interval.
	outside int
}

func newScanModel(t *testing.T, rng *rand.Rand) *scanModel {
	m := &scanModel{records: map[uint64]Record{}}
	if rng.Intn(3) == 0 {
		m.enc = NewV1()
	} else {
		np := uint64(1) << rng.Intn(4)
		enc, err := NewTickets(np*uint64(1+rng.Intn(8)), np)
		if err != nil {
			t.Fatal(err)
		}
		m.enc = enc
	}
	// Dense timestamps (many per partition), sparse ones (more partitions
	// than RowSpansMax allows exact spans for), and the top of the space.
	var universe []func() uint64
	universe = append(universe,
		func() uint64 { return 1 + uint64(rng.Intn(300)) },
		func() uint64 { return 1 + uint64(rng.Intn(200_000)) },
		func() uint64 { return math.MaxUint64 - 2 - uint64(rng.Intn(300)) },
	)
	gen := universe[rng.Intn(len(universe))]
	type kv struct{ k, v []byte }
	var kvs []kv
	for range rng.Intn(200) {
		ts := gen()
		if _, dup := m.records[ts]; dup {
			continue
		}
		r := Record{StartTs: ts}
		switch rng.Intn(3) {
		case 0:
			r.Decided, r.Aborted = true, true
		case 1:
			if ts > math.MaxUint64-10 { // no commit timestamp above it
				r.Decided, r.Aborted = true, true
				break
			}
			r.Decided, r.CommitTs = true, ts+1+uint64(rng.Intn(5))
		}
		switch rng.Intn(3) {
		case 0:
			r.HasStaging, r.Staging = true, Staging{Fence: true}
		case 1:
			r.HasStaging = true
			r.Staging = Staging{CommitTs: ts + 1, Writes: []StagedWrite{{Key: []byte("k"), ValueHash: 7}}}
		}
		if !r.Decided && !r.HasStaging {
			continue
		}
		m.records[ts] = r
		if r.Decided {
			c := r.CommitTs
			if r.Aborted {
				c = Aborted
			}
			v, err := m.enc.EncodeValue(ts, c)
			if err != nil {
				t.Fatal(err)
			}
			kvs = append(kvs, kv{m.enc.Key(ts), v})
		}
		if r.HasStaging {
			v := FenceValue()
			if !r.Staging.Fence {
				var err error
				if v, err = EncodeStaging(ts, r.Staging.CommitTs, r.Staging.Writes); err != nil {
					t.Fatal(err)
				}
			}
			kvs = append(kvs, kv{StagingKey(m.enc, ts), v})
		}
	}
	sort.Slice(kvs, func(i, j int) bool { return bytes.Compare(kvs[i].k, kvs[j].k) < 0 })
	for _, e := range kvs {
		m.keys, m.values = append(m.keys, e.k), append(m.values, e.v)
	}
	return m
}

// read is the ReadSpanFunc over the sorted keys, counting the keys read
// outside [from, to).
func (m *scanModel) read(from, to uint64) ReadSpanFunc {
	return func(sp Span, fn func(k, v []byte) error) error {
		i := 0
		if sp.Start != nil {
			i = sort.Search(len(m.keys), func(i int) bool { return bytes.Compare(m.keys[i], sp.Start) >= 0 })
		}
		for ; i < len(m.keys) && (sp.End == nil || bytes.Compare(m.keys[i], sp.End) < 0); i++ {
			if ts, _, err := startTsOfKey(m.enc, m.keys[i]); err == nil && (ts < from || ts >= to) {
				m.outside++
			}
			if err := fn(m.keys[i], m.values[i]); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestScanIntervalQuick checks ScanInterval (the planned spans, the filter
// and the join of status and staging records) against the plain twin:
// every record of the map whose start_ts is in [from, to). Exact plans
// read no key outside the interval; v1 returns start_ts order.
func TestScanIntervalQuick(t *testing.T) {
	f := func(seed int64) bool {
		rng := rand.New(rand.NewSource(seed))
		m := newScanModel(t, rng)
		// Intervals around the stored timestamps, and a few arbitrary.
		var tss []uint64
		for ts := range m.records {
			tss = append(tss, ts)
		}
		pick := func() uint64 {
			if len(tss) == 0 || rng.Intn(4) == 0 {
				return rng.Uint64()
			}
			return tss[rng.Intn(len(tss))] + uint64(rng.Intn(3)) - 1
		}
		for range 20 {
			from, to := pick(), pick()
			if rng.Intn(10) == 0 {
				from, to = 0, math.MaxUint64
			}
			var want []Record
			for _, r := range m.records {
				if r.StartTs >= from && r.StartTs < to {
					want = append(want, r)
				}
			}
			m.outside = 0
			var got []Record
			err := ScanInterval(m.enc, from, to, m.read(from, to), func(r Record) error {
				got = append(got, r)
				return nil
			})
			if err != nil {
				t.Logf("seed %d: %s [%d, %d): %v", seed, m.enc.Name(), from, to, err)
				return false
			}
			if m.enc.Name() == "v1" && !slices.IsSortedFunc(got, func(a, b Record) int { return cmpTs(a.StartTs, b.StartTs) }) {
				t.Logf("seed %d: v1 scan not in start_ts order", seed)
				return false
			}
			byTs := func(a, b Record) int { return cmpTs(a.StartTs, b.StartTs) }
			slices.SortFunc(want, byTs)
			slices.SortFunc(got, byTs)
			if !reflect.DeepEqual(normalize(got), normalize(want)) {
				t.Logf("seed %d: %s [%d, %d): got %v, want %v", seed, m.enc.Name(), from, to, got, want)
				return false
			}
			if _, exact := ScanSpans(m.enc, from, to); exact && m.outside > 0 {
				t.Logf("seed %d: %s [%d, %d): exact plan read %d keys outside", seed, m.enc.Name(), from, to, m.outside)
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 150}); err != nil {
		t.Fatal(err)
	}
}

func cmpTs(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// normalize makes nil and empty slices compare equal.
func normalize(rs []Record) []Record {
	if len(rs) == 0 {
		return nil
	}
	return rs
}

// TestScanSpansShape: exact tickets plans are disjoint, sorted, one span
// per row met; wide intervals fall back to the whole table.
func TestScanSpansShape(t *testing.T) {
	enc, err := NewTickets(100, 4)
	if err != nil {
		t.Fatal(err)
	}
	spans, exact := ScanSpans(enc, 150, 350) // partitions 1..3
	if !exact || len(spans) != 12 {
		t.Fatalf("[150, 350): %d spans, exact=%v; want 12 exact", len(spans), exact)
	}
	for i := 1; i < len(spans); i++ {
		if bytes.Compare(spans[i-1].End, spans[i].Start) > 0 {
			t.Fatalf("spans %d and %d overlap or are out of order", i-1, i)
		}
	}
	if spans, exact := ScanSpans(enc, 0, 100*(RowSpansMax/4+1)); exact || len(spans) != 1 || spans[0].Start != nil || spans[0].End != nil {
		t.Fatalf("wide interval: %v exact=%v, want the whole table", spans, exact)
	}
	if spans, _ := ScanSpans(enc, 5, 5); len(spans) != 0 {
		t.Fatalf("empty interval planned %v", spans)
	}
	if spans, exact := ScanSpans(NewV1(), 10, 20); !exact || len(spans) != 1 {
		t.Fatalf("v1: %v exact=%v", spans, exact)
	}
}

// TestScanIntervalCorruption: a key that is neither a status nor a
// staging key, or a bad value, ends the scan with ErrCorruption.
func TestScanIntervalCorruption(t *testing.T) {
	enc := NewV1()
	for _, tc := range []struct{ k, v []byte }{
		{[]byte{0xff, 0xff}, nil},
		{enc.Key(15), []byte{0xc0}},
		{StagingKey(enc, 15), []byte{9, 9}},
	} {
		err := ScanInterval(enc, 10, 20, func(_ Span, fn func(k, v []byte) error) error { return fn(tc.k, tc.v) },
			func(Record) error { return nil })
		if !errors.Is(err, ErrCorruption) {
			t.Errorf("key %x value %x: err %v, want corruption", tc.k, tc.v, err)
		}
	}
}
