package statusbench

import (
	"context"
	"testing"
	"time"
)

// The loaders' request counts for the record's cell sets, as the record
// describes them: CL2 makes 50 requests for 100x100 (SQ = 200) and about
// 40 for 16x500; CL1 one per column; full batching one.
func TestLoaderPlans(t *testing.T) {
	want := map[string]map[string]int{
		"100x100 static": {"CL1": 100, "full batching": 1, "CL2": 50, "CL2 client": 50},
		"1000x10 static": {"CL1": 10, "full batching": 1, "CL2": 50, "CL2 client": 10},
		"16x500 dynamic": {"full batching": 1, "CL2": 40, "CL2 client": 40},
	}
	for _, w := range RecordWorkloads {
		cells := w.Cells(1)
		if len(cells) != w.Rows*w.Columns {
			t.Fatalf("%s: %d cells", w.Name, len(cells))
		}
		for _, l := range Loaders(50_000, 200) {
			plan := l.Plan(cells)
			n := 0
			for _, b := range plan {
				n += len(b)
			}
			if n != len(cells) {
				t.Errorf("%s, %s: the plan holds %d cells, want %d", w.Name, l.Name, n, len(cells))
			}
			if c, ok := want[w.Name][l.Name]; ok && len(plan) != c {
				t.Errorf("%s, %s: %d requests, want %d", w.Name, l.Name, len(plan), c)
			}
			if w.Dynamic && l.Name == "CL1" && len(plan) < 7900 {
				t.Errorf("16x500 dynamic, CL1: %d requests, want about 8,000 (one per column)", len(plan))
			}
		}
	}
}

func TestSizeAndLatencySmall(t *testing.T) {
	ctx := context.Background()
	configs := []StoreConfig{RecordStoreConfigs[0], RecordStoreConfigs[3]} // v1, tickets+BF
	rows, err := Size(ctx, t.TempDir(), configs, []int{5000}, 1, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		if r.Sizes.Entries != 5000 || r.Sizes.TotalBytes == 0 {
			t.Errorf("%s: %+v", r.Config.Name, r.Sizes)
		}
	}
	// The status-table filter is written only when asked for.
	if rows[0].Sizes.FilterBytes != 0 || rows[1].Sizes.FilterBytes < 5000*20/8 {
		t.Errorf("filter bytes: v1 without a filter %d, tickets+BF %d", rows[0].Sizes.FilterBytes, rows[1].Sizes.FilterBytes)
	}
	cells, err := Latency(ctx, LatencyOptions{Txns: 5000, Concurrency: []int{2}, HitRates: []int{100, 0},
		Duration: 100 * time.Millisecond, LookupsMax: 500, Configs: configs, Dir: t.TempDir()}, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 4 {
		t.Fatalf("%d cells", len(cells))
	}
	for _, c := range cells {
		if c.Lookups == 0 {
			t.Errorf("%+v: no lookups", c)
		}
		if (c.HitRate == 100 && c.Found != c.Lookups) || (c.HitRate == 0 && c.Found != 0) {
			t.Errorf("%s at hit rate %d: %d of %d lookups found a record", c.Config, c.HitRate, c.Found, c.Lookups)
		}
	}
	if n := len(LatencyTables(cells, configs, []int{2}, []int{100, 0})); n != 3 {
		t.Errorf("%d latency tables, want 3", n)
	}
}

// With v1, every status record of a run lands in the status table's last
// range (its keys all start with 0xff today); and the end-to-end scan
// reads every key's committed value in both variants.
func TestHotSpotsV1AndEndToEndSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts clusters")
	}
	ctx := context.Background()
	runs, err := HotSpots(ctx, HotSpotOptions{Encodings: []string{"v1"}, Ranges: []int{4}, Commits: 40, Concurrency: 4}, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Records != 40 || runs[0].Hottest() != 4 {
		t.Fatalf("v1 runs: %+v", runs)
	}
	cells, err := EndToEnd(ctx, EndToEndOptions{Keys: 200, Txns: 20, Trials: 1}, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 2 || cells[0].Lookups >= cells[1].Lookups {
		t.Fatalf("end to end: %+v (the batched variant must send fewer lookup requests)", cells)
	}
}
