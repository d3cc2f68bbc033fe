package txnstatus

import (
	"bytes"
	"errors"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"testing/quick"
)

func TestScheduleSwitchForEncode(t *testing.T) {
	tk := mustTickets(t, 0, 0)
	s := NewSchedule(NewV1(), 100)
	if _, err := s.Switch(tk, 100); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a switch at valid-through: %v, want ErrInvalidArgument", err)
	}
	if _, err := s.Switch(NewV1(), 200); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a switch to the same encoding: %v, want ErrInvalidArgument", err)
	}
	s2, err := s.Switch(tk, 101)
	if err != nil {
		t.Fatal(err)
	}
	s3, err := s2.Extend(500).Switch(NewV1(), 501)
	if err != nil {
		t.Fatal(err)
	}
	s3 = s3.Extend(400) // never shrinks
	if s3.ValidThrough != 500 {
		t.Fatalf("valid-through %d, want 500", s3.ValidThrough)
	}
	for ts, want := range map[uint64]string{0: "v1", 100: "v1", 101: "tickets", 500: "tickets", 501: "v1", math.MaxUint64: "v1"} {
		if got := s3.For(ts).Name(); got != want {
			t.Errorf("For(%d) = %s, want %s", ts, got, want)
		}
	}
	b, err := EncodeSchedule(s3)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeSchedule(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.ValidThrough != s3.ValidThrough || len(back.Eras) != 3 {
		t.Fatalf("round trip: %+v, want %+v", back, s3)
	}
	for i := range back.Eras {
		if back.Eras[i].From != s3.Eras[i].From || !SameEncoding(back.Eras[i].Encoding, s3.Eras[i].Encoding) {
			t.Fatalf("era %d: %+v, want %+v", i, back.Eras[i], s3.Eras[i])
		}
	}
	// Every truncation, and a few damaged bytes, are corruption.
	for n := range len(b) {
		if _, err := DecodeSchedule(b[:n]); !errors.Is(err, ErrCorruption) {
			t.Fatalf("decode of %d of %d bytes: %v, want ErrCorruption", n, len(b), err)
		}
	}
	for _, bad := range [][]byte{append(slices.Clone(b), 0), {2}, func() []byte { c := slices.Clone(b); c[0] = 9; return c }()} {
		if _, err := DecodeSchedule(bad); !errors.Is(err, ErrCorruption) {
			t.Fatalf("decode of %x: %v, want ErrCorruption", bad, err)
		}
	}
}

// collidingPair returns a tickets start timestamp t2 and a v1 start
// timestamp t1 with v1.Key(t1) == tickets.Key(t2) (default PQ and NP): a
// tickets key of 9 bytes starting 0xff then a byte below 0x80 is a v1 key
// of 63 bits. The row's low 8 bits must be ones (partition P = 15 mod 32,
// offset 15), and bits 9..15 not all zero (P >= 32).
func collidingPair(t *testing.T) (t1, t2 uint64) {
	tk := mustTickets(t, 0, 0)
	p := uint64(15 + 32*3)
	t2 = p*DefaultPartitioningQuantum + 5*DefaultRowsPerQuantum + 15
	k := tk.Key(t2)
	t1, err := NewV1().StartTs(k)
	if err != nil {
		t.Fatalf("tickets key %x of %d is no v1 key: %v", k, t2, err)
	}
	if !bytes.Equal(NewV1().Key(t1), k) {
		t.Fatal("not a collision")
	}
	return t1, t2
}

func TestScheduleCollides(t *testing.T) {
	t1, t2 := collidingPair(t)
	tk := mustTickets(t, 0, 0)
	if t2 >= t1 {
		t.Fatalf("t2 %d >= t1 %d", t2, t1)
	}
	// tickets first, then v1 from t1: both timestamps are refused.
	s, err := NewSchedule(tk, t2).Switch(NewV1(), t1)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Collides(t1) || !s.Collides(t2) {
		t.Fatalf("Collides(t1) %v, Collides(t2) %v, want both", s.Collides(t1), s.Collides(t2))
	}
	// The next tickets timestamp is in another row (its key starts with
	// another byte); the next column of the same row is the next v1 key.
	if s.Collides(t2 + 1) {
		t.Fatal("t2+1 collides")
	}
	if !s.Collides(t2+DefaultRowsPerQuantum) || !s.Collides(t1+1) {
		t.Fatal("the next column of t2's row and t1+1 do not collide")
	}
	// With v1 from t1+1 on, t1 is a tickets timestamp: no collision.
	s2, err := NewSchedule(tk, t2).Switch(NewV1(), t1+1)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Collides(t2) {
		t.Fatal("t2 collides with a v1 key of a timestamp outside the v1 era")
	}
	// One era: no collisions.
	if NewSchedule(tk, math.MaxUint64).Collides(t2) {
		t.Fatal("a single era collides")
	}
	// The scan of the v1 era does not take t2's tickets record for t1's.
	v, _ := tk.EncodeValue(t2, t2+3)
	read := func(sp Span, fn func(k, v []byte) error) error {
		k := tk.Key(t2)
		if (sp.Start == nil || bytes.Compare(k, sp.Start) >= 0) && (sp.End == nil || bytes.Compare(k, sp.End) < 0) {
			return fn(k, v)
		}
		return nil
	}
	var got []Record
	if err := ScanSchedule(s, 0, math.MaxUint64, read, func(r Record) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].StartTs != t2 || got[0].CommitTs != t2+3 {
		t.Fatalf("scan: %+v, want t2's record only", got)
	}
}

// TestScanScheduleQuick: a table written under a schedule of two or three
// eras (each record in its era's encoding, timestamps that collide left
// out as Begin leaves them out) scans, over any interval, to exactly the
// model's records.
func TestScanScheduleQuick(t *testing.T) {
	f := func(seed int64) bool {
		rng := rand.New(rand.NewSource(seed))
		np := uint64(1) << rng.Intn(4)
		encs := []Encoding{NewV1(), mustTickets(t, np*uint64(1+rng.Intn(8)), np)}
		if rng.Intn(2) == 0 {
			mix, err := NewTicketsMix(np*uint64(1+rng.Intn(8)), np)
			if err != nil {
				t.Fatal(err)
			}
			encs[1] = mix
		}
		if rng.Intn(2) == 0 {
			encs[0], encs[1] = encs[1], encs[0]
		}
		top := rng.Intn(2) == 0
		gen := func() uint64 {
			if top {
				return math.MaxUint64 - 2 - uint64(rng.Intn(600))
			}
			return 1 + uint64(rng.Intn(600))
		}
		base := uint64(0)
		if top {
			base = math.MaxUint64 - 602
		}
		s := NewSchedule(encs[0], base+200)
		s, _ = s.Switch(encs[1], base+201)
		if rng.Intn(2) == 0 {
			s, _ = s.Extend(base+400).Switch(encs[0], base+401)
		}
		records := map[uint64]Record{}
		type kv struct{ k, v []byte }
		var kvs []kv
		for range rng.Intn(200) {
			ts := gen()
			if _, dup := records[ts]; dup || s.Collides(ts) {
				continue
			}
			enc := s.For(ts)
			r := Record{StartTs: ts}
			if rng.Intn(2) == 0 || ts > math.MaxUint64-10 {
				r.Decided, r.Aborted = true, true
			} else {
				r.Decided, r.CommitTs = true, ts+1+uint64(rng.Intn(5))
			}
			c := r.CommitTs
			if r.Aborted {
				c = Aborted
			}
			v, err := enc.EncodeValue(ts, c)
			if err != nil {
				t.Fatal(err)
			}
			kvs = append(kvs, kv{enc.Key(ts), v})
			if rng.Intn(3) == 0 {
				r.HasStaging, r.Staging = true, Staging{Fence: true}
				kvs = append(kvs, kv{StagingKey(enc, ts), FenceValue()})
			}
			records[ts] = r
		}
		sort.Slice(kvs, func(i, j int) bool { return bytes.Compare(kvs[i].k, kvs[j].k) < 0 })
		read := func(sp Span, fn func(k, v []byte) error) error {
			for _, e := range kvs {
				if (sp.Start == nil || bytes.Compare(e.k, sp.Start) >= 0) && (sp.End == nil || bytes.Compare(e.k, sp.End) < 0) {
					if err := fn(e.k, e.v); err != nil {
						return err
					}
				}
			}
			return nil
		}
		from, to := gen(), gen()
		if from > to {
			from, to = to, from
		}
		var got, want []Record
		if err := ScanSchedule(s, from, to, read, func(r Record) error { got = append(got, r); return nil }); err != nil {
			t.Logf("seed %d: %v", seed, err)
			return false
		}
		for ts, r := range records {
			if ts >= from && ts < to {
				want = append(want, r)
			}
		}
		byTs := func(a, b Record) int { return cmpTs(a.StartTs, b.StartTs) }
		slices.SortFunc(got, byTs)
		slices.SortFunc(want, byTs)
		if !reflect.DeepEqual(normalize(got), normalize(want)) {
			t.Logf("seed %d: [%d, %d): got %d records, want %d", seed, from, to, len(got), len(want))
			return false
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 200}); err != nil {
		t.Fatal(err)
	}
}

// TestTicketsMix: tickets-mix is a bijection (every key decodes to its
// timestamp; no two timestamps of a dense stretch share a key), keeps
// each timestamp in its tickets partition and column, spreads timestamps
// that all end in small counters over every row, and round-trips through
// a schedule.
func TestTicketsMix(t *testing.T) {
	for _, np := range []uint64{1, 2, 16} {
		mix, err := NewTicketsMix(np*1000, np)
		if err != nil {
			t.Fatal(err)
		}
		plain := mustTickets(t, np*1000, np)
		seen := map[string]uint64{}
		rng := rand.New(rand.NewSource(int64(np)))
		var tss []uint64
		for i := range uint64(5000) {
			tss = append(tss, i, 1<<MixShift+i, math.MaxUint64-i, rng.Uint64())
		}
		for _, ts := range tss {
			k := mix.Key(ts)
			back, err := mix.StartTs(k)
			if err != nil || back != ts {
				t.Fatalf("np %d: key of %d decodes to %d, %v", np, ts, back, err)
			}
			if prev, dup := seen[string(k)]; dup && prev != ts {
				t.Fatalf("np %d: %d and %d share key %x", np, prev, ts, k)
			}
			seen[string(k)] = ts
			// Same column as plain tickets (the last bytes).
			if !bytes.Equal(k[8:], plain.Key(ts)[8:]) {
				t.Fatalf("np %d: %d changed column", np, ts)
			}
		}
	}
	if _, err := NewTicketsMix(30, 3); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NP 3: %v, want ErrInvalidArgument", err)
	}
	// Start timestamps that are the first few of their millisecond: plain
	// tickets puts them in few rows, tickets-mix in all 16 evenly.
	mix, _ := NewTicketsMix(0, 0)
	plain := mustTickets(t, 0, 0)
	rows := func(enc Encoding) map[byte]int {
		m := map[byte]int{}
		for ms := uint64(1_700_000_000_000); ms < 1_700_000_000_000+1600; ms++ {
			m[enc.Key(ms<<MixShift + ms%3)[0]>>4]++
		}
		return m
	}
	if p, x := rows(plain), rows(mix); len(p) != 3 || len(x) != 16 {
		t.Fatalf("rows used: plain %d, mix %d; want 3 and 16", len(p), len(x))
	} else {
		for r, n := range x {
			if n < 90 || n > 110 {
				t.Fatalf("mix: row %x holds %d of 1600, want about 100", r, n)
			}
		}
	}
	s, err := NewSchedule(plain, 10).Switch(mix, 11)
	if err != nil {
		t.Fatal(err)
	}
	b, err := EncodeSchedule(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeSchedule(b)
	if err != nil || back.For(11).Name() != "tickets-mix" || !SameEncoding(back.For(11), mix) || SameEncoding(back.For(0), mix) {
		t.Fatalf("schedule round trip: %+v, %v", back, err)
	}
}

// TestCheckNext: the versions Extend and Switch make may follow the
// schedule they came from, and each way of breaking a rule is refused
// with ErrInvalidArgument and a message naming it.
func TestCheckNext(t *testing.T) {
	tk := mustTickets(t, 0, 0)
	mix, err := NewTicketsMix(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	prev, err := NewSchedule(NewV1(), 100).Switch(tk, 150) // v1 from 0, tickets from 150, valid through 100
	if err != nil {
		t.Fatal(err)
	}
	prev = prev.Extend(200)
	const now = 250
	switched, err := prev.Switch(mix, 300)
	if err != nil {
		t.Fatal(err)
	}
	for _, ok := range []Schedule{prev, prev.Extend(1000), switched, switched.Extend(400)} {
		if err := CheckNext(prev, ok, now); err != nil {
			t.Errorf("CheckNext(%+v) = %v, want nil", ok, err)
		}
	}
	eras := func(es ...Era) []Era { return es }
	for _, tc := range []struct {
		name string
		next Schedule
		want string
	}{
		{"era removed", Schedule{Eras: eras(Era{0, NewV1()}), ValidThrough: 300}, "may not be removed"},
		{"era altered: encoding", Schedule{Eras: eras(Era{0, NewV1()}, Era{150, mix}), ValidThrough: 300}, "may not change"},
		{"era altered: cutover", Schedule{Eras: eras(Era{0, NewV1()}, Era{160, tk}), ValidThrough: 300}, "may not change"},
		{"first era altered", Schedule{Eras: eras(Era{0, tk}, Era{150, mix}), ValidThrough: 300}, "may not change"},
		{"valid-through back", prev.clone().withValidThrough(199), "may not go back"},
		{"cutover at valid-through", Schedule{Eras: eras(Era{0, NewV1()}, Era{150, tk}, Era{200, NewV1()}), ValidThrough: 200}, "not above the newest version's valid-through"},
		{"cutover not in the future", Schedule{Eras: eras(Era{0, NewV1()}, Era{150, tk}, Era{now, NewV1()}), ValidThrough: 200}, "not in the future"},
		{"cutovers not increasing", Schedule{Eras: eras(Era{0, NewV1()}, Era{150, tk}, Era{400, NewV1()}, Era{400, mix}), ValidThrough: 200}, "not strictly increasing"},
		{"same encoding twice", Schedule{Eras: eras(Era{0, NewV1()}, Era{150, tk}, Era{400, tk}), ValidThrough: 200}, "repeats the encoding"},
		{"no era", Schedule{ValidThrough: 300}, "1 to ErasMax"},
	} {
		err := CheckNext(prev, tc.next, now)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: CheckNext = %v, want ErrInvalidArgument naming %q", tc.name, err, tc.want)
		}
	}
}

func (s Schedule) withValidThrough(v uint64) Schedule { s.ValidThrough = v; return s }

// TestNamed: the three encodings by name; anything else is refused.
func TestNamed(t *testing.T) {
	for _, name := range []string{"v1", "tickets", "tickets-mix"} {
		enc, err := Named(name, 0, 0)
		if err != nil || enc.Name() != name {
			t.Errorf("Named(%q) = %v, %v", name, enc, err)
		}
	}
	if _, err := Named("v2", 0, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Named(v2) = %v, want ErrInvalidArgument", err)
	}
}
