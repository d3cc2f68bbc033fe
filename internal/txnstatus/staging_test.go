package txnstatus

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// TestStagingKey checks that a staging key is never a status key, sorts
// right after its own status key, and inverts, in both encodings.
func TestStagingKey(t *testing.T) {
	tk, err := NewTickets(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, enc := range []Encoding{NewV1(), tk} {
		for _, ts := range []uint64{1, 2, 15, 16, 17, 127, 128, 1 << 20, 25_000_001, 1 << 40, 1<<63 + 5} {
			sk, stk := enc.Key(ts), StagingKey(enc, ts)
			if bytes.Compare(sk, stk) >= 0 || !bytes.HasPrefix(stk, sk) {
				t.Fatalf("%s: staging key %x does not follow status key %x", enc.Name(), stk, sk)
			}
			if _, err := enc.StartTs(stk); !errors.Is(err, ErrCorruption) {
				t.Fatalf("%s: StartTs(staging key of %d) = %v, want corruption", enc.Name(), ts, err)
			}
			got, err := StagingStartTs(enc, stk)
			if err != nil || got != ts {
				t.Fatalf("%s: StagingStartTs = %d, %v; want %d", enc.Name(), got, err, ts)
			}
			if _, err := StagingStartTs(enc, sk); !errors.Is(err, ErrCorruption) && ts != 0 {
				// A status key ending in 0x00 would be taken apart; it
				// must then fail to invert.
				if k2, _ := StagingStartTs(enc, sk); bytes.Equal(StagingKey(enc, k2), sk) {
					t.Fatalf("%s: status key %x of %d reads as a staging key", enc.Name(), sk, ts)
				}
			}
			// No other transaction's status key is this staging key.
			if other, err := enc.StartTs(stk); err == nil && bytes.Equal(enc.Key(other), stk) {
				t.Fatalf("%s: staging key of %d is the status key of %d", enc.Name(), ts, other)
			}
		}
	}
}

// TestStagingValue round-trips STAGING records and the fence, and checks
// that damaged values are corruption.
func TestStagingValue(t *testing.T) {
	ws := []StagedWrite{{Key: []byte("\x01a"), ValueHash: 7}, {Key: []byte{}, ValueHash: 1<<64 - 1}}
	v, err := EncodeStaging(100, 150, ws)
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeStaging(100, v)
	if err != nil || s.Fence || s.CommitTs != 150 || !reflect.DeepEqual(s.Writes, ws) {
		t.Fatalf("decode: %+v %v", s, err)
	}
	if s, err := DecodeStaging(100, FenceValue()); err != nil || !s.Fence {
		t.Fatalf("fence: %+v %v", s, err)
	}
	if _, err := EncodeStaging(100, 100, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("commit_ts = start_ts: %v", err)
	}
	for i := range len(v) {
		if _, err := DecodeStaging(100, v[:i]); !errors.Is(err, ErrCorruption) {
			t.Fatalf("truncated to %d bytes: %v", i, err)
		}
	}
	if _, err := DecodeStaging(100, append(v, 0)); !errors.Is(err, ErrCorruption) {
		t.Fatalf("trailing byte: %v", err)
	}
}

// FuzzDecodeStaging: no input panics, and what decodes re-encodes to bytes
// that decode to the same record (uvarints may be written longer than
// needed, so the bytes themselves may differ).
func FuzzDecodeStaging(f *testing.F) {
	v, _ := EncodeStaging(5, 9, []StagedWrite{{Key: []byte("k"), ValueHash: 3}})
	f.Add(uint64(5), v)
	f.Add(uint64(5), FenceValue())
	f.Fuzz(func(t *testing.T, start uint64, b []byte) {
		s, err := DecodeStaging(start, b)
		if err != nil {
			return
		}
		var again []byte
		if s.Fence {
			again = FenceValue()
		} else if again, err = EncodeStaging(start, s.CommitTs, s.Writes); err != nil {
			t.Fatal(err)
		}
		s2, err := DecodeStaging(start, again)
		if err != nil || !reflect.DeepEqual(s, s2) {
			t.Fatalf("%x decodes as %+v, re-encodes as %x, which decodes as %+v (%v)", b, s, again, s2, err)
		}
	})
}
