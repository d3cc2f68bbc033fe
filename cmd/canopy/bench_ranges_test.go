package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/bench/kvbench"
)

// TestBenchRangesSmall runs `canopy bench ranges` at toy sizes and checks
// that it writes its CSV (one row per cluster, a repeated value as its
// second round) and its plot, and refuses
// out-of-range flags.
func TestBenchRangesSmall(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ranges")
	prof := filepath.Join(t.TempDir(), "put.prof")
	o := benchRangesOptions{ranges: []int{1, 3, 1}, putProfile: prof, idle: 100 * time.Millisecond, concurrency: 2, readyMax: 2 * time.Minute, out: out,
		kv: kvbench.Options{ValueBytes: 16, Keys: 20, Duration: 200 * time.Millisecond, OpsMax: 100}}
	if err := runBenchRanges(context.Background(), o, "test"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out + ".csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 4 {
		t.Fatalf("CSV has %d lines, want a header and 3 rows:\n%s", len(lines), b)
	}
	if last := lines[3]; !strings.HasPrefix(last, "1,2,") {
		t.Errorf("the repeated value's row %q is not round 2 of 1 range", last)
	}
	for _, suffix := range []string{".1-r1", ".3-r1", ".1-r2"} {
		if _, err := os.Stat(prof + suffix); err != nil {
			t.Errorf("no put profile of that cluster: %v", err)
		}
	}
	if _, err := os.Stat(out + ".png"); err != nil {
		t.Fatal(err)
	}
	o.ranges = []int{0}
	if err := runBenchRanges(context.Background(), o, "test"); err == nil {
		t.Fatal("--ranges 0 accepted")
	}
}
