package vlogbench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-db/canopy/internal/storage"
)

// TestRunSmall runs a tiny configuration end to end and checks that every
// figure is accounted and every output is written. It asserts no timing.
func TestRunSmall(t *testing.T) {
	dir := t.TempDir()
	rs, err := Run(Config{
		Dir: filepath.Join(dir, "scratch"), BudgetBytes: 1 << 20,
		ValueSizesBytes: []int{16 << 10}, Modes: []storage.Mode{storage.ModeInline, storage.ModePunch},
		Case2Factors: []int{1}, AlignedPunch: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3+2 {
		t.Fatalf("%d results", len(rs))
	}
	for _, r := range rs {
		if r.Updates == 0 || r.UserBytes == 0 || r.EngineWrittenBytes < r.UserBytes || r.AllocatedBytes == 0 || r.LiveBytes == 0 {
			t.Fatalf("%s: implausible %+v", r.Label(), r)
		}
		if r.Mode == storage.ModeInline && (r.GCRewrittenBytes != 0 || r.BlobAllocatedBytes != 0) {
			t.Fatalf("inline run has blob figures: %+v", r)
		}
	}
	var sb strings.Builder
	if err := WriteTable(&sb, rs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), "punch-aligned") || !strings.Contains(sb.String(), "Figure 6") {
		t.Fatalf("table:\n%s", sb.String())
	}
	if err := WriteCSV(filepath.Join(dir, "v.csv"), rs); err != nil {
		t.Fatal(err)
	}
	paths, err := WritePlots(dir, rs)
	if err != nil || len(paths) != 5 {
		t.Fatalf("plots %v %v", paths, err)
	}
	for _, p := range append(paths, filepath.Join(dir, "v.csv")) {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", p, err)
		}
	}
}
