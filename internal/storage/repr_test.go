package storage

import (
	"bytes"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestApplyRepr checks that a batch's operations replayed on another
// engine through Repr and ApplyRepr give the same data, large values
// (separated at commit) included, and that damaged representations are
// refused as corruption.
func TestApplyRepr(t *testing.T) {
	for _, mode := range []Mode{ModeInline, ModePunch} {
		t.Run(mode.String(), func(t *testing.T) {
			open := func() *Engine {
				e, err := Open("db", Options{FS: vfs.NewMem(), Mode: mode, ThresholdBytes: 64})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = e.Close() })
				return e
			}
			src, dst := open(), open()
			b := src.NewBatch()
			defer b.Close()
			big := bytes.Repeat([]byte("v"), 1000)
			k1, k2, k3 := []byte{PrefixData, 'a'}, []byte{PrefixData, 'b'}, []byte{PrefixData, 'c'}
			must(t, b.Set(k1, []byte("small")))
			must(t, b.Set(k2, big))
			must(t, b.Set(k3, []byte("gone")))
			must(t, b.Delete(k3))
			must(t, b.Set([]byte{PrefixData - 1, 'x'}, []byte("local")))

			a := dst.NewWriteBatch()
			defer a.Close()
			must(t, a.ApplyRepr(b.Repr()))
			must(t, a.Commit(true))
			for _, kv := range []struct{ k, v []byte }{{k1, []byte("small")}, {k2, big}} {
				got, err := dst.Get(kv.k)
				if err != nil || !bytes.Equal(got, kv.v) {
					t.Fatalf("get %q: %d bytes, %v", kv.k, len(got), err)
				}
			}
			if _, err := dst.Get(k3); !errors.Is(err, ErrNotFound) {
				t.Fatalf("deleted key: %v", err)
			}
			// Damaged representations.
			repr := append([]byte(nil), b.Repr()...)
			for _, bad := range [][]byte{repr[:5], repr[:len(repr)-3], append(append([]byte(nil), repr[:12]...), 0xff, 0x01)} {
				c := dst.NewWriteBatch()
				if err := c.ApplyRepr(bad); !errors.Is(err, ErrCorruption) {
					t.Errorf("damaged repr of %d bytes: %v, want ErrCorruption", len(bad), err)
				}
				c.Close()
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
