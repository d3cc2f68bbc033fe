package storage_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/canopy-db/canopy/internal/keys"
	"github.com/canopy-db/canopy/internal/mvcc"
	"github.com/canopy-db/canopy/internal/storage"
	"github.com/cockroachdb/pebble/v2"
)

func TestStatusTablePrefix(t *testing.T) {
	for _, k := range [][]byte{{}, {0}, {0xff, 1, 2}, {0, 0, 0}} {
		pk := mvcc.PlainKey(keys.StatusKey(k))
		if !bytes.HasPrefix(pk, storage.StatusTablePrefix()) {
			t.Errorf("status key %x is %x physically, without the prefix %x", k, pk, storage.StatusTablePrefix())
		}
	}
	for _, k := range [][]byte{keys.UserKey([]byte("s")), keys.HeartbeatKey(7), mvcc.IntentKey(keys.UserKey(nil))} {
		if bytes.HasPrefix(mvcc.PlainKey(k), storage.StatusTablePrefix()) {
			t.Errorf("key %x has the status table's physical prefix", k)
		}
	}
}

// The status-table filter holds the status keys of a table only, and reads
// (hits, misses, other keys) are the same with it as without.
func TestStatusFilter(t *testing.T) {
	for _, bits := range []int{-1, storage.DefaultStatusFilterBitsPerKey} {
		t.Run(fmt.Sprint(bits), func(t *testing.T) {
			e, err := storage.Open(t.TempDir(), storage.Options{StatusFilterBitsPerKey: bits})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			b := e.NewWriteBatch()
			for i := range 1000 {
				if err := mvcc.PutPlain(b, keys.StatusKey(fmt.Appendf(nil, "s%04d", 2*i)), []byte("c")); err != nil {
					t.Fatal(err)
				}
				if err := mvcc.PutPlain(b, keys.UserKey(fmt.Appendf(nil, "u%04d", i)), []byte("u")); err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Commit(true); err != nil {
				t.Fatal(err)
			}
			b.Close()
			if err := e.DB().Flush(); err != nil {
				t.Fatal(err)
			}
			levels, err := e.DB().SSTables(pebble.WithProperties())
			if err != nil {
				t.Fatal(err)
			}
			var filter uint64
			for _, lv := range levels {
				for _, tb := range lv {
					filter += tb.Properties.FilterSize
				}
			}
			// 1,000 status keys at 20 bits: about 2.5 KB (the user keys
			// would double it).
			if bits < 0 && filter != 0 || bits > 0 && (filter < 2400 || filter > 3500) {
				t.Errorf("filter bytes %d with %d bits per key", filter, bits)
			}
			for i := range 2000 {
				_, found, err := mvcc.GetPlain(e, keys.StatusKey(fmt.Appendf(nil, "s%04d", i)))
				if err != nil || found != (i%2 == 0) {
					t.Fatalf("status key %d: found %v, err %v", i, found, err)
				}
			}
			for i := range 1000 {
				if _, found, err := mvcc.GetPlain(e, keys.UserKey(fmt.Appendf(nil, "u%04d", i))); err != nil || !found {
					t.Fatalf("user key %d: found %v, err %v", i, found, err)
				}
			}
		})
	}
}
