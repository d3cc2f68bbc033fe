package mvcc

import (
	"bytes"
	"errors"
	"testing"

	"github.com/canopy-db/canopy/internal/storage"
)

func TestIntentValueRoundTrip(t *testing.T) {
	for _, v := range []IntentValue{
		{Txn: TxnMeta{StartTs: 1}},
		{Txn: TxnMeta{StartTs: 1}, Value: []byte{}},
		{Txn: TxnMeta{StartTs: 1 << 63, HeartbeatKey: []byte("\x00h12345678")}, Value: []byte("value")},
		{Txn: TxnMeta{StartTs: 300, HeartbeatKey: []byte("hb")}, IsDelete: true},
	} {
		raw := EncodeIntentValue(v)
		got, err := DecodeIntentValue(raw)
		if err != nil {
			t.Fatalf("decode %x: %v", raw, err)
		}
		if got.Txn.StartTs != v.Txn.StartTs || !bytes.Equal(got.Txn.HeartbeatKey, v.Txn.HeartbeatKey) ||
			!bytes.Equal(got.Value, v.Value) || got.IsDelete != v.IsDelete {
			t.Fatalf("round trip of %+v: %+v", v, got)
		}
	}
}

func TestIntentValueCorruption(t *testing.T) {
	good := EncodeIntentValue(IntentValue{Txn: TxnMeta{StartTs: 5, HeartbeatKey: []byte("hb")}, Value: []byte("v")})
	for _, b := range [][]byte{
		nil,
		{intentFormatV1},
		{2, 0, 5, 0},                          // unknown format
		{intentFormatV1, 0x02, 5, 0},          // unknown flag
		{intentFormatV1, 0, 0, 0},             // start_ts 0
		{intentFormatV1, 0, 0x85, 0x00, 0},    // non-minimal varint
		{intentFormatV1, 0, 5},                // missing heartbeat length
		{intentFormatV1, 0, 5, 3, 'h'},        // heartbeat key too short
		{intentFormatV1, 1, 5, 0, 'v'},        // tombstone with a value
		{intentFormatV1, 0, 0xff, 0xff, 0xff}, // bad varint
		good[:3],
	} {
		if _, err := DecodeIntentValue(b); !errors.Is(err, storage.ErrCorruption) {
			t.Errorf("DecodeIntentValue(%x) = %v, want ErrCorruption", b, err)
		}
	}
}

func TestVersionValue(t *testing.T) {
	v, del, err := DecodeVersionValue(EncodeVersionValue([]byte("x"), false))
	if err != nil || del || string(v) != "x" {
		t.Fatalf("value: %q %t %v", v, del, err)
	}
	v, del, err = DecodeVersionValue(EncodeVersionValue(nil, true))
	if err != nil || !del || v != nil {
		t.Fatalf("tombstone: %q %t %v", v, del, err)
	}
	for _, b := range [][]byte{nil, {0}, {3, 'x'}, {versionTagTombstone, 'x'}} {
		if _, _, err := DecodeVersionValue(b); !errors.Is(err, storage.ErrCorruption) {
			t.Errorf("DecodeVersionValue(%x) = %v, want ErrCorruption", b, err)
		}
	}
}

// FuzzDecodeIntentValue: no panic, only ErrCorruption, and every accepted
// value re-encodes to the same bytes.
func FuzzDecodeIntentValue(f *testing.F) {
	f.Add([]byte{})
	f.Add(EncodeIntentValue(IntentValue{Txn: TxnMeta{StartTs: 5, HeartbeatKey: []byte("hb")}, Value: []byte("v")}))
	f.Add(EncodeIntentValue(IntentValue{Txn: TxnMeta{StartTs: 1 << 40}, IsDelete: true}))
	f.Add([]byte{intentFormatV1, 0, 0x85, 0x00, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeIntentValue(b)
		if err != nil {
			if !errors.Is(err, storage.ErrCorruption) {
				t.Fatalf("DecodeIntentValue(%x): %v is not ErrCorruption", b, err)
			}
			return
		}
		if re := EncodeIntentValue(v); !bytes.Equal(re, b) {
			t.Fatalf("DecodeIntentValue(%x) = %+v; re-encodes to %x", b, v, re)
		}
	})
}

// FuzzDecodeVersionValue: no panic, only ErrCorruption, and every accepted
// value re-encodes to the same bytes.
func FuzzDecodeVersionValue(f *testing.F) {
	f.Add([]byte{})
	f.Add(EncodeVersionValue([]byte("v"), false))
	f.Add(EncodeVersionValue(nil, true))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, del, err := DecodeVersionValue(b)
		if err != nil {
			if !errors.Is(err, storage.ErrCorruption) {
				t.Fatalf("DecodeVersionValue(%x): %v is not ErrCorruption", b, err)
			}
			return
		}
		if re := EncodeVersionValue(v, del); !bytes.Equal(re, b) {
			t.Fatalf("DecodeVersionValue(%x) = %q, %t; re-encodes to %x", b, v, del, re)
		}
	})
}
