package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func testOpts(fs vfs.FS, mode Mode) Options {
	return Options{
		FS: fs, Mode: mode, ThresholdBytes: 1024, BlobFileTargetBytes: 256 << 10,
		MemTableBytes: 1 << 20, CacheBytes: 1 << 20,
		GC: GCOptions{Disabled: true, ReaderWaitMax: 20 * time.Millisecond, PunchBytesMin: 1},
	}
}

func mustOpen(t *testing.T, dir string, o Options) *Engine {
	t.Helper()
	e, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func dk(i int) []byte { return DataKey([]byte(fmt.Sprintf("k%05d", i))) }

func val(i, gen, n int) []byte {
	b := bytes.Repeat([]byte{byte('a' + (i+gen)%26)}, n)
	copy(b, fmt.Sprintf("%d/%d/", i, gen))
	return b
}

var allModes = []Mode{ModeInline, ModeRewrite, ModePunch, ModePebble}

// TestReadPathsAllModes: every read path returns what was written, in every
// mode, across a restart; only data values at or above the threshold are
// separated, range-local values never.
func TestReadPathsAllModes(t *testing.T) {
	for _, mode := range allModes {
		t.Run(mode.String(), func(t *testing.T) {
			fs := vfs.NewMem()
			e := mustOpen(t, "db", testOpts(fs, mode))
			model := map[string][]byte{}
			b := e.NewWriteBatch()
			for i := 0; i < 40; i++ {
				v := val(i, 0, []int{0, 10, 1023, 1024, 5000, 70000}[i%6])
				model[string(dk(i))] = v
				if err := b.Set(dk(i), v); err != nil {
					t.Fatal(err)
				}
			}
			big := bytes.Repeat([]byte{'r'}, 8000)
			if err := b.Set(RaftLogKey(1, 5), big); err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(true); err != nil {
				t.Fatal(err)
			}
			b.Close()
			// Range-local values are stored as given.
			raw, closer, err := e.DB().Get(RaftLogKey(1, 5))
			if err != nil || !bytes.Equal(raw, big) {
				t.Fatalf("raft entry stored as %d bytes: %v", len(raw), err)
			}
			closer.Close()
			// Large data values are pointers exactly in the separating modes.
			raw, closer, _ = e.DB().Get(dk(4))
			if wantPtr := mode.separates(); (raw[0] == tagPointer) != wantPtr {
				t.Fatalf("mode %v: tag %#x", mode, raw[0])
			}
			closer.Close()
			check := func(e *Engine) {
				t.Helper()
				for k, v := range model {
					got, err := e.Get([]byte(k))
					if err != nil || !bytes.Equal(got, v) {
						t.Fatalf("Get %q: %d bytes, %v", k, len(got), err)
					}
				}
				checkIter(t, e, model)
				snap := e.NewSnapshot()
				defer snap.Close()
				for k, v := range model {
					if got, err := snap.Get([]byte(k)); err != nil || !bytes.Equal(got, v) {
						t.Fatalf("snapshot Get %q: %v", k, err)
					}
				}
				// Indexed batch: own writes over LSM values, both kinds.
				ib := e.NewBatch()
				defer ib.Close()
				nv := val(1, 9, 3000)
				_ = ib.Set(dk(1), nv)
				_ = ib.Delete(dk(2))
				if got, err := ib.Get(dk(1)); err != nil || !bytes.Equal(got, nv) {
					t.Fatalf("batch own write: %v", err)
				}
				if _, err := ib.Get(dk(2)); !errors.Is(err, ErrNotFound) {
					t.Fatalf("batch own delete: %v", err)
				}
				if got, err := ib.Get(dk(4)); err != nil || !bytes.Equal(got, model[string(dk(4))]) {
					t.Fatalf("batch read of LSM value: %v", err)
				}
				it, _ := ib.NewIter(dk(0), dk(10))
				n := 0
				for it.First(); it.Valid(); it.Next() {
					v, err := it.Value()
					want := model[string(it.Key())]
					if bytes.Equal(it.Key(), dk(1)) {
						want = nv
					}
					if err != nil || !bytes.Equal(v, want) {
						t.Fatalf("batch iter %q: %v", it.Key(), err)
					}
					n++
				}
				it.Close()
				if n != 9 {
					t.Fatalf("batch iter saw %d keys", n)
				}
			}
			check(e)
			if err := e.CheckBlobs(); err != nil {
				t.Fatal(err)
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = mustOpen(t, "db", testOpts(fs, mode))
			defer e.Close()
			check(e)
			if err := e.CheckBlobs(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func checkIter(t *testing.T, e *Engine, model map[string][]byte) {
	t.Helper()
	it, err := e.NewIter([]byte{PrefixData}, DataSpanEnd())
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		v, err := it.Value()
		if err != nil || !bytes.Equal(v, model[string(it.Key())]) {
			t.Fatalf("iter %q: %d bytes, %v", it.Key(), len(v), err)
		}
		n++
	}
	if n != len(model) {
		t.Fatalf("iter saw %d keys, want %d", n, len(model))
	}
}

// randomOps applies seeded random batches (sets of mixed sizes, deletes,
// range deletes, keys touched twice in a batch) and updates model once each
// commit has returned.
func randomOps(t *testing.T, e *Engine, rng *rand.Rand, model map[string][]byte, batches, keys int) {
	randomOpsSync(t, e, rng, model, batches, keys, false)
}

func randomOpsSync(t *testing.T, e *Engine, rng *rand.Rand, model map[string][]byte, batches, keys int, alwaysSync bool) {
	t.Helper()
	for i := 0; i < batches; i++ {
		b := e.NewBatch()
		type change struct {
			k string
			v []byte // nil: deleted
		}
		var changes []change
		for n := 1 + rng.IntN(4); n > 0; n-- {
			k := rng.IntN(keys)
			switch r := rng.IntN(20); {
			case r < 14:
				v := val(k, rng.IntN(1000), []int{100, 1500, 3000, 9000}[rng.IntN(4)])
				_ = b.Set(dk(k), v)
				changes = append(changes, change{string(dk(k)), v})
			case r < 18:
				_ = b.Delete(dk(k))
				changes = append(changes, change{string(dk(k)), nil})
			default:
				hi := k + 1 + rng.IntN(5)
				_ = b.DeleteRange(dk(k), dk(hi))
				for j := k; j < hi; j++ {
					changes = append(changes, change{string(dk(j)), nil})
				}
			}
		}
		if err := b.Commit(alwaysSync || rng.IntN(2) == 0); err != nil {
			t.Fatal(err)
		}
		b.Close()
		for _, c := range changes {
			if c.v == nil {
				delete(model, c.k)
			} else {
				model[c.k] = c.v
			}
		}
	}
}

func checkModel(t *testing.T, e *Engine, model map[string][]byte) {
	t.Helper()
	checkIter(t, e, model)
	if err := e.CheckBlobs(); err != nil {
		t.Fatal(err)
	}
}

// TestDiscardAccountingExact: after random writes, the discard count of
// every file equals its record bytes minus the bytes still pointed to, in
// memory and persisted, also after a restart.
func TestDiscardAccountingExact(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	fs := vfs.NewMem()
	e := mustOpen(t, "db", testOpts(fs, ModePunch))
	model := map[string][]byte{}
	randomOps(t, e, rng, model, 400, 60)
	checkModel(t, e, model)
	var total int64
	for _, d := range e.DiscardBytes() {
		total += d
	}
	if total == 0 {
		t.Fatal("no discard counted")
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = mustOpen(t, "db", testOpts(fs, ModePunch))
	checkModel(t, e, model)
	randomOps(t, e, rng, model, 100, 60)
	checkModel(t, e, model)
	e.Close()
	// Switching to inline keeps reading pointers and counting their death.
	e = mustOpen(t, "db", testOpts(fs, ModeInline))
	defer e.Close()
	randomOps(t, e, rng, model, 100, 60)
	checkModel(t, e, model)
}

// TestGC: random writes interleaved with GC rounds, in both GC modes, on
// the real file system (so punching really deallocates).
func TestGC(t *testing.T) {
	for _, mode := range []Mode{ModeRewrite, ModePunch} {
		t.Run(mode.String(), func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 2))
			dir := t.TempDir()
			o := testOpts(nil, mode)
			e := mustOpen(t, dir, o)
			model := map[string][]byte{}
			var rewritten, punched int
			for round := 0; round < 8; round++ {
				randomOps(t, e, rng, model, 150, 80)
				rep, err := e.RunGC()
				if err != nil {
					t.Fatal(err)
				}
				rewritten += len(rep.Rewritten)
				punched += len(rep.Punched)
				checkModel(t, e, model)
			}
			t.Logf("%v: %d files rewritten, %d punched, stats %+v", mode, rewritten, punched, e.BlobStats())
			if mode == ModeRewrite && rewritten == 0 || mode == ModePunch && punched == 0 {
				t.Fatalf("GC did nothing")
			}
			if mode == ModePunch {
				if e.BlobStats().GCPunchedBytes <= 0 {
					t.Fatalf("punching freed no blocks")
				}
				// Punching keeps every file's size.
				for num := range e.DiscardBytes() {
					bf := e.blobs.file(num)
					st, err := bf.f.Stat()
					if err != nil || st.Size() != bf.meta.SizeBytes {
						t.Fatalf("file %d: size %d, sealed at %d (%v)", num, st.Size(), bf.meta.SizeBytes, err)
					}
				}
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			e = mustOpen(t, dir, o)
			defer e.Close()
			checkModel(t, e, model)
		})
	}
}

// TestGCConcurrentWriters: writers overwrite keys while GC rounds run; no
// GC pointer update may overwrite a newer write.
func TestGCConcurrentWriters(t *testing.T) {
	for _, mode := range []Mode{ModeRewrite, ModePunch} {
		t.Run(mode.String(), func(t *testing.T) {
			fs := vfs.NewMem()
			o := testOpts(fs, mode)
			o.GC.MergeBelowBytes = o.BlobFileTargetBytes // merge eagerly
			e := mustOpen(t, "db", o)
			defer e.Close()
			const writers, keysPer, rounds = 2, 30, 150
			models := make([]map[string][]byte, writers)
			done := make(chan error, writers)
			for w := 0; w < writers; w++ {
				models[w] = map[string][]byte{}
				go func(w int) {
					rng := rand.New(rand.NewPCG(uint64(w), 3))
					for i := 0; i < rounds; i++ {
						k := w*keysPer + rng.IntN(keysPer)
						v := val(k, i, 2000+rng.IntN(3000))
						b := e.NewWriteBatch()
						_ = b.Set(dk(k), v)
						if err := b.Commit(false); err != nil {
							done <- err
							return
						}
						b.Close()
						models[w][string(dk(k))] = v
					}
					done <- nil
				}(w)
			}
			// Never t.Fatal while writers run: the deferred Close would pull
			// the engine from under them.
			finished := 0
			var gcErr error
			for finished < writers {
				select {
				case err := <-done:
					if err != nil {
						t.Error(err)
					}
					finished++
				default:
					if gcErr == nil {
						_, gcErr = e.RunGC()
					}
				}
			}
			if gcErr != nil {
				t.Fatal(gcErr)
			}
			if _, err := e.RunGC(); err != nil {
				t.Fatal(err)
			}
			model := map[string][]byte{}
			for _, m := range models {
				for k, v := range m {
					model[k] = v
				}
			}
			checkModel(t, e, model)
		})
	}
}

// TestSnapshotHoldsBackGC: a snapshot that may follow an old pointer keeps
// its bytes from being punched or deleted until it closes.
func TestSnapshotHoldsBackGC(t *testing.T) {
	for _, mode := range []Mode{ModeRewrite, ModePunch} {
		t.Run(mode.String(), func(t *testing.T) {
			fs := vfs.NewMem()
			e := mustOpen(t, "db", testOpts(fs, mode))
			defer e.Close()
			old := map[string][]byte{}
			for i := 0; i < 200; i++ {
				v := val(i, 0, 3000)
				old[string(dk(i))] = v
				b := e.NewWriteBatch()
				_ = b.Set(dk(i), v)
				_ = b.Commit(false)
				b.Close()
			}
			snap := e.NewSnapshot()
			model := map[string][]byte{}
			for i := 0; i < 200; i++ {
				v := val(i, 1, 3000)
				model[string(dk(i))] = v
				b := e.NewWriteBatch()
				_ = b.Set(dk(i), v)
				_ = b.Commit(false)
				b.Close()
			}
			for r := 0; r < 3; r++ {
				if _, err := e.RunGC(); err != nil {
					t.Fatal(err)
				}
			}
			for k, v := range old {
				got, err := snap.Get([]byte(k))
				if err != nil || !bytes.Equal(got, v) {
					t.Fatalf("snapshot read after GC: %v", err)
				}
			}
			snap.Close()
			rep, err := e.RunGC()
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Punched)+len(rep.Deleted)+len(rep.Rewritten) == 0 {
				t.Fatalf("GC did nothing once the snapshot closed: %+v", rep)
			}
			checkModel(t, e, model)
		})
	}
}
