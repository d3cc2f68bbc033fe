package nemesis

import (
	"context"
	"flag"
	"github.com/canopy-db/canopy/internal/testbin"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/nemesis"
)

var (
	duration = flag.Duration("duration", 0, "how long to inject faults (0: long enough for every kind once)")
	seed     = flag.Uint64("seed", 1, "seed of the fault targets and operations")
	workload = flag.String("workload", "list-append", "list-append, bank or register")
)

// binPath is the canopy binary TestMain built; skipWhy or buildErr say why
// there is none.
var (
	binPath  string
	skipWhy  string
	buildErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The nodes these tests start check their Puts' key cache against
	// the store (eval.VerifyKeyStatesForTesting).
	os.Setenv("CANOPY_VERIFY_KEY_STATES", "1")
	os.Exit(func() int {
		if testing.Short() {
			skipWhy = "multi-process tests are skipped under -short"
			return m.Run()
		}
		var cleanup func()
		binPath, cleanup, skipWhy, buildErr = testbin.Build("canopy-nemesis-bin-")
		defer cleanup()
		return m.Run()
	}())
}

// logWriter sends progress lines to t.Log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestNemesisShort injects every fault kind at least once into three real
// processes running list-append transactions and asserts a checked history
// without violations and a recovery after every heal.
func TestNemesisShort(t *testing.T) {
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	const interval, faultDuration = 2 * time.Second, 2 * time.Second
	// By default every kind once, counted (a loaded machine makes the run
	// longer rather than leaving a kind out); -duration runs for a time.
	d, faults := *duration, 0
	if d == 0 {
		faults = len(nemesis.Kinds)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Duration(len(nemesis.Kinds))*time.Minute+5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	rep, err := nemesis.Run(ctx, nemesis.Config{
		Binary: binPath, Dir: dir, Nodes: 3, Workload: *workload,
		Kinds: nemesis.Kinds, Duration: d, Faults: faults, Interval: interval, FaultDuration: faultDuration,
		Workers: 4, OpTimeout: 10 * time.Second, Seed: *seed,
		Progress: logWriter{t}, ProgressEvery: 10 * time.Second,
		StartArgs: []string{"--raft-tick=50ms"},
	})
	if rep != nil {
		var b strings.Builder
		rep.Print(&b)
		t.Logf("verdict table:\n%s", b.String())
	}
	if err != nil {
		dumpLogs(t, dir)
		t.Fatal(err)
	}
	for _, k := range nemesis.Kinds {
		if rep.Faults[k] == 0 {
			t.Errorf("fault kind %s was never injected", k)
		}
	}
	if rep.CheckErr != nil {
		t.Errorf("no verdict: %v", rep.CheckErr)
	}
	for _, v := range rep.Violations {
		t.Errorf("violation: %s", v)
	}
	if rep.Outcomes[nemesis.OK] == 0 {
		t.Error("no operation succeeded")
	}
	for _, r := range rep.Recoveries {
		if !r.Recovered {
			t.Errorf("no operation succeeded after healing %s (at %v)", r.Fault, r.HealedAt)
		}
	}
	if t.Failed() {
		dumpLogs(t, dir)
	}
}

func dumpLogs(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "n*.log"))
	for _, p := range logs {
		b, _ := os.ReadFile(p)
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		t.Logf("last lines of %s:\n%s", p, strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
}
