package storage

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestMetamorphicModes runs one seeded stream of batches, reads and GC
// rounds under every mode and both blob placements; every run must return
// the same reads. A final range deletion over the whole keyspace (across
// prefixes) must leave every blob record discarded.
func TestMetamorphicModes(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	type cfg struct {
		name string
		o    func(fs vfs.FS) Options
	}
	var cfgs []cfg
	for _, m := range allModes {
		cfgs = append(cfgs, cfg{m.String(), func(fs vfs.FS) Options { return testOpts(fs, m) }})
	}
	cfgs = append(cfgs, cfg{"punch-aligned", func(fs vfs.FS) Options {
		o := testOpts(fs, ModePunch)
		o.BlobPlacement = 1 // vlog.AlignLarge
		return o
	}})
	var want []string
	for _, c := range cfgs {
		fs := vfs.NewMem()
		e := mustOpen(t, "db", c.o(fs))
		rng := rand.New(rand.NewPCG(seed, 11))
		model := map[string][]byte{}
		var history []string
		for round := 0; round < 6; round++ {
			randomOps(t, e, rng, model, 80, 50)
			for j := 0; j < 20; j++ {
				k := dk(rng.IntN(50))
				v, err := e.Get(k)
				history = append(history, fmt.Sprintf("%q=%x/%v", k, sum(v), err))
			}
			if _, err := e.RunGC(); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if round == 3 {
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				e = mustOpen(t, "db", c.o(fs))
			}
		}
		checkModel(t, e, model)
		// Delete everything, across prefixes, in one batch with a Raft entry.
		b := e.NewWriteBatch()
		_ = b.Set(RaftLogKey(7, 1), []byte("entry"))
		_ = b.DeleteRange([]byte{PrefixRangeLocal}, []byte{PrefixNodeLocal})
		if err := b.Commit(true); err != nil {
			t.Fatal(err)
		}
		b.Close()
		checkModel(t, e, map[string][]byte{})
		for num, d := range e.DiscardBytes() {
			if d != e.blobs.file(num).meta.RecordBytes {
				t.Fatalf("%s: file %d: discard %d of %d after deleting everything", c.name, num, d, e.blobs.file(num).meta.RecordBytes)
			}
		}
		e.Close()
		if want == nil {
			want = history
			continue
		}
		for i := range want {
			if history[i] != want[i] {
				t.Fatalf("%s differs from %s at read %d: %s vs %s", c.name, cfgs[0].name, i, history[i], want[i])
			}
		}
	}
}

func sum(v []byte) []byte {
	if len(v) < 8 {
		return v
	}
	return append(append([]byte(nil), v[:8]...), byte(len(v)), byte(len(v)>>8), byte(bytes.Count(v, []byte{'a'})))
}
