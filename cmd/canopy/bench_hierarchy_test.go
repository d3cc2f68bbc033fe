package main

import (
	"strings"
	"testing"
	"time"

	"github.com/canopy-db/canopy/internal/bench/hierbench"
)

// TestBenchHierarchyValidate: --batch-sizes, --distributed-share and
// --rounds as validate reads them.
func TestBenchHierarchyValidate(t *testing.T) {
	base := func() benchHierarchyOptions {
		return benchHierarchyOptions{
			systems: []string{"hierarchy-locking/b10"}, clients: []int{100}, objects: 8000,
			limits: hierbench.Limits{Duration: 5 * time.Second, Warmup: time.Second}, rf: 1, dbConns: 8, loadPar: 64,
			runMax: time.Minute, readyMax: time.Minute, raftTick: 100 * time.Millisecond, batchTimeout: time.Millisecond,
			shares: []float64{1}, rounds: 1,
		}
	}
	ok := []func(*benchHierarchyOptions){
		func(o *benchHierarchyOptions) {},
		func(o *benchHierarchyOptions) {
			o.systems = []string{"hierarchy-locking", "hierarchy-timestamps"}
			o.batchSizes = []int{1, 5, 10, 25, 50, 100}
		},
		func(o *benchHierarchyOptions) { o.systems = []string{"hierarchy-timestamps/b25", "2pc-locking"} },
		func(o *benchHierarchyOptions) { o.shares = []float64{0, 0.5}; o.rounds = 3 },
		func(o *benchHierarchyOptions) { o.think = 200 * time.Millisecond },
	}
	for i, f := range ok {
		o := base()
		f(&o)
		ss, err := o.validate()
		if err != nil {
			t.Errorf("case %d: %v", i, err)
		}
		if i == 1 && len(ss) != 12 {
			t.Errorf("batch sweep: %d systems, want 12", len(ss))
		}
	}
	bad := map[string]func(*benchHierarchyOptions){
		"batch":   func(o *benchHierarchyOptions) { o.systems = []string{"hierarchy-locking"}; o.batchSizes = []int{0} },
		"nobatch": func(o *benchHierarchyOptions) { o.systems = []string{"hierarchy-locking"} },
		"share":   func(o *benchHierarchyOptions) { o.shares = []float64{0, 1.5} },
		"noshare": func(o *benchHierarchyOptions) { o.shares = nil },
		"small":   func(o *benchHierarchyOptions) { o.objects = 16; o.shares = []float64{0.5} },
		"rounds":  func(o *benchHierarchyOptions) { o.rounds = HierarchyRoundsMax + 1 },
		"think":   func(o *benchHierarchyOptions) { o.think = -time.Millisecond },
		"thinkx":  func(o *benchHierarchyOptions) { o.think = hierbench.ThinkMax + time.Second },
	}
	for name, f := range bad {
		o := base()
		f(&o)
		if _, err := o.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "--") {
			t.Errorf("%s: error %q names no flag", name, err)
		}
	}
}
