package eval

import (
	"reflect"
	"testing"
)

// TestKeyRecordRoundTrip: records with and without shared locks encode
// and decode to themselves; a record without shared locks keeps format 1,
// which stores written before shared locks existed hold.
func TestKeyRecordRoundTrip(t *testing.T) {
	for _, k := range []keyRecord{
		{onePC: []onePCEntry{{10, 12}}, refused: []uint64{7}},
		{shared: []uint64{5, 9}},
		{onePC: []onePCEntry{{1, 2}, {3, 9}}, refused: []uint64{4}, shared: []uint64{100}},
	} {
		b := k.encode()
		if len(k.shared) == 0 && b[0] != keyRecordFormat {
			t.Errorf("%+v encoded with format %d, want %d", k, b[0], keyRecordFormat)
		}
		got, err := decodeKeyRecord(b)
		if err != nil {
			t.Fatalf("decode(%x): %v", b, err)
		}
		if !reflect.DeepEqual(got, k) {
			t.Errorf("round trip of %+v gave %+v", k, got)
		}
	}
	var k keyRecord
	if err := k.share(3); err != nil || k.sharedBy(3) != 0 || k.sharedBy(4) != 3 {
		t.Errorf("share/sharedBy: %v %d %d", err, k.sharedBy(3), k.sharedBy(4))
	}
	if !k.unshare(3) || k.unshare(3) || !k.empty() {
		t.Error("unshare")
	}
}

// FuzzDecodeKeyRecord: any bytes decode to a record or an error, never a
// panic; a record that decodes encodes to bytes that decode to it again.
func FuzzDecodeKeyRecord(f *testing.F) {
	f.Add((&keyRecord{onePC: []onePCEntry{{10, 12}}, refused: []uint64{7}}).encode())
	f.Add((&keyRecord{shared: []uint64{5, 9}}).encode())
	f.Add([]byte{2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := decodeKeyRecord(b)
		if err != nil {
			return
		}
		again, err := decodeKeyRecord(k.encode())
		if err != nil || !reflect.DeepEqual(again, k) {
			t.Fatalf("%x decoded to %+v, which re-encodes to %+v, %v", b, k, again, err)
		}
	})
}
