package mvcc

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"github.com/canopy-db/canopy/internal/storage"
)

func TestEncodeKeyLayout(t *testing.T) {
	for _, tc := range []struct {
		k    []byte
		kind KeyKind
		ts   uint64
		want []byte
	}{
		{nil, KindPlain, 0, []byte{0x02, 0x00, 0x01}},
		{[]byte("a"), KindPlain, 0, []byte{0x02, 'a', 0x00, 0x01}},
		{[]byte("a"), KindIntent, 0, []byte{0x02, 'a', 0x00, 0x01, 0x00}},
		{[]byte{0x00, 'a', 0x00}, KindIntent, 0, []byte{0x02, 0x00, 0xff, 'a', 0x00, 0xff, 0x00, 0x01, 0x00}},
		{[]byte("a"), KindVersion, 1, []byte{0x02, 'a', 0x00, 0x01, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}},
		{[]byte("a"), KindVersion, math.MaxUint64, []byte{0x02, 'a', 0x00, 0x01, 0x01, 0, 0, 0, 0, 0, 0, 0, 0}},
	} {
		got := EncodeKey(tc.k, tc.kind, tc.ts)
		if !bytes.Equal(got, tc.want) {
			t.Errorf("EncodeKey(%q, %s, %d) = %x, want %x", tc.k, tc.kind, tc.ts, got, tc.want)
		}
		k, kind, ts, err := DecodeKey(got)
		if err != nil || !bytes.Equal(k, tc.k) || kind != tc.kind || ts != tc.ts {
			t.Errorf("DecodeKey(%x) = %q, %s, %d, %v", got, k, kind, ts, err)
		}
	}
}

func TestDecodeKeyCorruption(t *testing.T) {
	for _, b := range [][]byte{
		nil,
		{0x01, 'a', 0x00, 0x01},             // wrong prefix
		{0x02, 'a'},                         // no terminator
		{0x02, 'a', 0x00},                   // truncated escape
		{0x02, 'a', 0x00, 0x02},             // bad escape
		{0x02, 'a', 0x00, 0x01, 0x02},       // bad slot
		{0x02, 'a', 0x00, 0x01, 0x00, 0x00}, // intent with trailing bytes
		{0x02, 'a', 0x00, 0x01, 0x01, 0x00}, // short version
		{0x02, 'a', 0x00, 0x01, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // version at ts 0
	} {
		if _, _, _, err := DecodeKey(b); !errors.Is(err, storage.ErrCorruption) {
			t.Errorf("DecodeKey(%x) = %v, want ErrCorruption", b, err)
		}
	}
}

// slotRank orders the slots of one logical key: plain, intent, then
// versions newest first.
func slotRank(kind KeyKind, ts uint64) (int, uint64) {
	switch kind {
	case KindPlain:
		return 0, 0
	case KindIntent:
		return 1, 0
	default:
		return 2, math.MaxUint64 - ts
	}
}

// wantOrder is the order the encoding must preserve, computed from the
// logical parts.
func wantOrder(k1 []byte, kind1 KeyKind, ts1 uint64, k2 []byte, kind2 KeyKind, ts2 uint64) int {
	if c := bytes.Compare(k1, k2); c != 0 {
		return c
	}
	r1, t1 := slotRank(kind1, ts1)
	r2, t2 := slotRank(kind2, ts2)
	switch {
	case r1 != r2:
		return cmpInt(r1, r2)
	case t1 < t2:
		return -1
	case t1 > t2:
		return 1
	}
	return 0
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// kindFrom maps fuzzer bytes to a valid kind and timestamp.
func kindFrom(b byte, ts uint64) (KeyKind, uint64) {
	switch b % 3 {
	case 0:
		return KindPlain, 0
	case 1:
		return KindIntent, 0
	default:
		if ts == 0 {
			ts = 1
		}
		return KindVersion, ts
	}
}

// FuzzKeyOrder checks that the encoding preserves the logical order and
// that every physical key lies inside SpanBounds of exactly the spans that
// contain its logical key.
func FuzzKeyOrder(f *testing.F) {
	f.Add([]byte("a"), byte(0), uint64(0), []byte("a\x00"), byte(2), uint64(5))
	f.Add([]byte("a"), byte(2), uint64(7), []byte("a"), byte(2), uint64(9))
	f.Add([]byte("a\x00"), byte(1), uint64(0), []byte("a\x01"), byte(0), uint64(0))
	f.Add([]byte(""), byte(2), uint64(math.MaxUint64), []byte("\x00"), byte(0), uint64(0))
	f.Add([]byte("ab"), byte(2), uint64(1), []byte("a"), byte(2), uint64(1))
	f.Fuzz(func(t *testing.T, k1 []byte, b1 byte, ts1 uint64, k2 []byte, b2 byte, ts2 uint64) {
		kind1, ts1 := kindFrom(b1, ts1)
		kind2, ts2 := kindFrom(b2, ts2)
		e1 := EncodeKey(k1, kind1, ts1)
		e2 := EncodeKey(k2, kind2, ts2)
		if got, want := bytes.Compare(e1, e2), wantOrder(k1, kind1, ts1, k2, kind2, ts2); got != want {
			t.Fatalf("order of (%q,%s,%d)=%x and (%q,%s,%d)=%x: %d, want %d", k1, kind1, ts1, e1, k2, kind2, ts2, e2, got, want)
		}
		// e1 lies in SpanBounds(start, end) exactly when k1 is in [start, end).
		lo, hi := SpanBounds(k2, nil)
		inPhysical := bytes.Compare(e1, lo) >= 0 && bytes.Compare(e1, hi) < 0
		if inPhysical != (bytes.Compare(k1, k2) >= 0) {
			t.Fatalf("%q in [%q, end): physical says %t", k1, k2, inPhysical)
		}
		if bytes.Compare(k2, k1) < 0 || len(k2) == 0 {
			return // an empty end means the end of the keyspace: checked above
		}
		lo, hi = SpanBounds(k1, k2)
		for _, k := range [][]byte{k1, k2} {
			for _, kind := range []KeyKind{KindPlain, KindIntent, KindVersion} {
				ts := uint64(0)
				if kind == KindVersion {
					ts = max(ts1, 1)
				}
				e := EncodeKey(k, kind, ts)
				inPhysical := bytes.Compare(e, lo) >= 0 && bytes.Compare(e, hi) < 0
				if inLogical := bytes.Compare(k, k1) >= 0 && bytes.Compare(k, k2) < 0; inPhysical != inLogical {
					t.Fatalf("%q (%s) in [%q, %q): logical %t, physical %t", k, kind, k1, k2, inLogical, inPhysical)
				}
			}
		}
	})
}

// FuzzDecodeKey feeds arbitrary bytes to DecodeKey: it must not panic,
// must fail only with ErrCorruption, and every key it accepts must
// re-encode to the same bytes.
func FuzzDecodeKey(f *testing.F) {
	f.Add([]byte{})
	f.Add(EncodeKey([]byte("a\x00b"), KindPlain, 0))
	f.Add(EncodeKey([]byte("a"), KindIntent, 0))
	f.Add(EncodeKey([]byte("\x00\x00"), KindVersion, 42))
	f.Add([]byte{0x02, 0x00, 0x01, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, kind, ts, err := DecodeKey(b)
		if err != nil {
			if !errors.Is(err, storage.ErrCorruption) {
				t.Fatalf("DecodeKey(%x): %v is not ErrCorruption", b, err)
			}
			return
		}
		if re := EncodeKey(k, kind, ts); !bytes.Equal(re, b) {
			t.Fatalf("DecodeKey(%x) = %q, %s, %d; re-encodes to %x", b, k, kind, ts, re)
		}
	})
}

// FuzzKeyRoundTrip checks DecodeKey(EncodeKey(k, kind, ts)) == (k, kind, ts).
func FuzzKeyRoundTrip(f *testing.F) {
	f.Add([]byte("a\x00\xff\x00\x01"), byte(2), uint64(3))
	f.Add([]byte{}, byte(1), uint64(0))
	f.Fuzz(func(t *testing.T, k []byte, b byte, ts uint64) {
		kind, ts := kindFrom(b, ts)
		e := EncodeKey(k, kind, ts)
		gk, gkind, gts, err := DecodeKey(e)
		if err != nil || !bytes.Equal(gk, k) || gkind != kind || gts != ts {
			t.Fatalf("round trip of (%q, %s, %d) via %x: (%q, %s, %d, %v)", k, kind, ts, e, gk, gkind, gts, err)
		}
	})
}
