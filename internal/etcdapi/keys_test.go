package etcdapi

import (
	"bytes"
	"errors"
	"testing"
	"testing/quick"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	f := func(version, create, lease int64, value []byte) bool {
		e := envelope{version: version&(1<<62-1) + 1, create: create & (1<<62 - 1), lease: lease & (1<<62 - 1)}
		got, v, err := decodeEnvelope(encodeEnvelope(e, value))
		return err == nil && got == e && bytes.Equal(v, value)
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
	g := func(ttl, expiry int64) bool {
		r := leaseRecord{ttlSeconds: ttl & (1<<62 - 1), expiryMs: expiry & (1<<62 - 1)}
		got, err := decodeLease(encodeLease(r))
		return err == nil && got == r
	}
	if err := quick.Check(g, nil); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeRefusesGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, {}, {2, 1, 0, 0}, {1}, {1, 0, 0, 0}, {1, 0xff}} {
		if _, _, err := decodeEnvelope(b); !errors.Is(err, errCorrupt) {
			t.Errorf("decodeEnvelope(%x): %v, want errCorrupt", b, err)
		}
	}
}

func TestDataSpan(t *testing.T) {
	s, e := dataSpan([]byte("a"), nil)
	if !bytes.Equal(s, append(bytes.Clone(dataPrefix), 'a')) || !bytes.Equal(e, append(bytes.Clone(s), 0)) {
		t.Fatalf("one key: [%q, %q)", s, e)
	}
	s, e = dataSpan([]byte("a"), []byte{0})
	if !bytes.Equal(e, dataPrefixEnd) || bytes.Compare(s, e) >= 0 {
		t.Fatalf("from key: [%q, %q)", s, e)
	}
	if !bytes.HasPrefix(leaseKey(1), Prefix) || bytes.HasPrefix(leaseKey(1), dataPrefix) {
		t.Fatal("lease keys must be outside the data keyspace")
	}
}

// FuzzDecodeEnvelope: bytes read back from the store never panic the
// decoder, and what decodes re-encodes to the same bytes.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(encodeEnvelope(envelope{version: 3, create: 7, lease: 9}, []byte("v")))
	f.Add([]byte{1, 1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, v, err := decodeEnvelope(b)
		if err != nil {
			return
		}
		if e.version <= 0 {
			t.Fatalf("decoded version %d", e.version)
		}
		if _, v2, err := decodeEnvelope(encodeEnvelope(e, v)); err != nil || !bytes.Equal(v, v2) {
			t.Fatalf("re-encoding: %v", err)
		}
	})
}

func FuzzDecodeLease(f *testing.F) {
	f.Add(encodeLease(leaseRecord{ttlSeconds: 10, expiryMs: 123456}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeLease(b)
		if err != nil {
			return
		}
		if got, err := decodeLease(encodeLease(r)); err != nil || got != r {
			t.Fatalf("re-encoding %+v: %+v, %v", r, got, err)
		}
	})
}
