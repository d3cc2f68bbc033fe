package storage

import (
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCrashAtEveryStep simulates a crash at GC and commit steps (the
// testingHook points) with vfs.NewCrashableMem: the clone taken at the step
// keeps what was synced and, at random, some of what was not. Reopened, the
// store must hold exactly the values acknowledged (synced) before the step,
// every one readable, and the discard accounting must check.
func TestCrashAtEveryStep(t *testing.T) {
	for _, mode := range []Mode{ModeRewrite, ModePunch} {
		t.Run(mode.String(), func(t *testing.T) {
			run := func(seed uint64, crashAt int) (calls int) {
				fs := vfs.NewCrashableMem()
				o := testOpts(fs, mode)
				o.GC.MergeBelowBytes = o.BlobFileTargetBytes / 2
				e := mustOpen(t, "db", o)
				rng := rand.New(rand.NewPCG(seed, 7))
				model := map[string][]byte{}
				var clone *vfs.MemFS
				var modelAtCrash map[string][]byte
				testingHook = func(string) {
					calls++
					if calls == crashAt {
						clone = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(seed, uint64(crashAt)))})
						modelAtCrash = maps.Clone(model)
					}
				}
				defer func() { testingHook = nil }()
				for round := 0; round < 4; round++ {
					randomOpsSync(t, e, rng, model, 60, 40, true)
					if _, err := e.RunGC(); err != nil {
						t.Fatal(err)
					}
				}
				testingHook = nil
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				if crashAt == 0 {
					return calls
				}
				if clone == nil {
					t.Fatalf("crash point %d not reached", crashAt)
				}
				e2, err := Open("db", testOpts(clone, mode))
				if err != nil {
					t.Fatalf("seed %d crash %d: reopen: %v", seed, crashAt, err)
				}
				defer e2.Close()
				checkIter(t, e2, modelAtCrash)
				if err := e2.CheckBlobs(); err != nil {
					t.Fatalf("seed %d crash %d: %v", seed, crashAt, err)
				}
				// And GC still works on the recovered store.
				if _, err := e2.RunGC(); err != nil {
					t.Fatal(err)
				}
				checkModel(t, e2, modelAtCrash)
				return calls
			}
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			total := run(seed, 0)
			if total < 10 {
				t.Fatalf("only %d crash points", total)
			}
			// Every step when there are few, else a spread of 40.
			step := max(1, total/40)
			for k := 1; k <= total; k += step {
				run(seed, k)
			}
		})
	}
}
