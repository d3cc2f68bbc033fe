package txnstatus

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"testing"
	"testing/quick"
)

// The record's table of VAR_LONG encodings (seed 003, "Physical
// Representation in Cassandra"); -1 is a Java long, 2^64-1 here.
func TestVarLongRecordExamples(t *testing.T) {
	for _, tc := range []struct {
		v   uint64
		hex string
	}{
		{20, "14"},
		{33, "21"},
		{28, "1c"},
		{42, "2a"},
		{37, "25"},
		{3141592, "e02fefd8"},
		{3141595, "e02fefdb"},
		{math.MaxUint64, "ff80ffffffffffffffff"},
	} {
		got := hex.EncodeToString(AppendVarLong(nil, tc.v))
		if got != tc.hex {
			t.Errorf("VarLong(%d) = %s, want %s", tc.v, got, tc.hex)
		}
	}
}

// Every length boundary: the last number of each length and the first of
// the next.
func TestVarLongBoundaries(t *testing.T) {
	for n := 1; n < VarLongBytesMax; n++ {
		for _, v := range []uint64{varLongBounds[n] - 1, varLongBounds[n]} {
			checkVarLong(t, v)
		}
		if got := VarLongLen(varLongBounds[n] - 1); got != n {
			t.Errorf("VarLongLen(%d) = %d, want %d", varLongBounds[n]-1, got, n)
		}
		if got := VarLongLen(varLongBounds[n]); got != n+1 {
			t.Errorf("VarLongLen(%d) = %d, want %d", varLongBounds[n], got, n+1)
		}
	}
	checkVarLong(t, 0)
	checkVarLong(t, math.MaxUint64)
}

func checkVarLong(t *testing.T, v uint64) {
	t.Helper()
	enc := AppendVarLong([]byte{0xaa}, v)[1:] // appends, does not overwrite
	if len(enc) != VarLongLen(v) {
		t.Fatalf("len(VarLong(%d)) = %d, VarLongLen = %d", v, len(enc), VarLongLen(v))
	}
	got, n, err := DecodeVarLong(append(enc, 0x55)) // trailing bytes are left alone
	if err != nil || got != v || n != len(enc) {
		t.Fatalf("DecodeVarLong(%x) = %d, %d, %v; want %d, %d", enc, got, n, err, v, len(enc))
	}
}

func TestVarLongRoundTripQuick(t *testing.T) {
	f := func(v uint64, shift uint8) bool {
		v >>= shift % 64 // cover every length, not just 10-byte numbers
		enc := AppendVarLong(nil, v)
		got, err := decodeWholeVarLong(enc)
		return err == nil && got == v && len(enc) == VarLongLen(v)
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 20000}); err != nil {
		t.Fatal(err)
	}
}

func TestVarLongOrderQuick(t *testing.T) {
	f := func(a, b uint64, sa, sb uint8) bool {
		a >>= sa % 64
		b >>= sb % 64
		c := bytes.Compare(AppendVarLong(nil, a), AppendVarLong(nil, b))
		switch {
		case a < b:
			return c < 0
		case a > b:
			return c > 0
		default:
			return c == 0
		}
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 20000}); err != nil {
		t.Fatal(err)
	}
}

func TestVarLongRejects(t *testing.T) {
	for _, h := range []string{
		"",                     // empty
		"80",                   // truncated 2-byte form
		"8001",                 // non-minimal 1
		"c00000",               // non-minimal 0
		"ff",                   // truncated prefix
		"ff00000000000000ff",   // non-minimal 255 in the 9-byte form
		"14ff",                 // trailing byte
		"ff0000000000000000",   // non-minimal 9-byte form
		"ff81ffffffffffffffff", // 65 bits
		"ffc0",                 // prefix too long
		"ff8000000000000000",   // truncated 10-byte form
	} {
		b, _ := hex.DecodeString(h)
		if _, err := decodeWholeVarLong(b); !errors.Is(err, ErrCorruption) {
			t.Errorf("decode(%s) = %v, want ErrCorruption", h, err)
		}
	}
}

// FuzzDecodeVarLong: decoding never panics; whatever decodes re-encodes to
// the same bytes (minimality), and encode-then-decode is the identity.
func FuzzDecodeVarLong(f *testing.F) {
	for _, s := range []string{"14", "e02fefd8", "ff80ffffffffffffffff", "ff7fffffffffffffff", "8001", ""} {
		b, _ := hex.DecodeString(s)
		f.Add(b, uint64(0))
	}
	f.Add([]byte{0xfe}, uint64(math.MaxUint64))
	f.Fuzz(func(t *testing.T, b []byte, x uint64) {
		if v, n, err := DecodeVarLong(b); err == nil {
			if n < 1 || n > len(b) || n > VarLongBytesMax {
				t.Fatalf("DecodeVarLong(%x) took %d bytes", b, n)
			}
			if re := AppendVarLong(nil, v); !bytes.Equal(re, b[:n]) {
				t.Fatalf("DecodeVarLong(%x) = %d, which encodes as %x", b[:n], v, re)
			}
		} else if !errors.Is(err, ErrCorruption) {
			t.Fatalf("DecodeVarLong(%x): error %v does not wrap ErrCorruption", b, err)
		}
		enc := AppendVarLong(nil, x)
		if got, err := decodeWholeVarLong(enc); err != nil || got != x {
			t.Fatalf("decode(encode(%d)) = %d, %v", x, got, err)
		}
	})
}
