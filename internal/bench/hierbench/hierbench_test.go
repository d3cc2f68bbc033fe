package hierbench

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/canopy-db/canopy/client"
)

// TestFormula: the thesis's worked example of 3.5.1 (4 nodes, decider at
// level 1): 2PC 4 steps / 16 messages, the hierarchy 3 / 13 without
// batching and 2.02 / 5.16 with batches of 50.
func TestFormula(t *testing.T) {
	for _, tc := range []struct {
		s             System
		steps, msgs   float64
		n, h          int
		wantFormulaOK bool
	}{
		{System{Protocol: client.Protocol2PCLocking}, 4, 16, 4, 1, true},
		{System{Protocol: client.ProtocolHierarchyLocking, Batch: 1}, 3, 13, 4, 1, true},
		{System{Protocol: client.ProtocolHierarchyTimestamps, Batch: 50}, 2.02, 5.16, 4, 1, true},
		{System{Protocol: client.Protocol2PCLocking}, 2, 2, 1, 1, true},
		{System{Protocol: client.ProtocolDefault}, 0, 0, 4, 1, false},
	} {
		steps, msgs, ok := Formula(tc.s, tc.n, tc.h)
		if ok != tc.wantFormulaOK || steps != tc.steps || msgs != tc.msgs {
			t.Errorf("Formula(%+v, %d, %d) = %v, %v, %v; want %v, %v, %v", tc.s, tc.n, tc.h, steps, msgs, ok, tc.steps, tc.msgs, tc.wantFormulaOK)
		}
	}
}

// TestKeyspace: object keys fall in their node's user range (the
// keyspace is split at byte i*256/Nodes) and are distinct.
func TestKeyspace(t *testing.T) {
	k := Keyspace{Objects: 80}
	if err := k.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Keyspace{Objects: ObjectsMax + 1}).Validate(); err == nil {
		t.Error("Objects above ObjectsMax accepted")
	}
	seen := map[string]bool{}
	for i := 0; i < Nodes; i++ {
		for j := 0; j < k.PerNode(); j++ {
			key := k.Key(i, j)
			if int(key[0])*Nodes/256 != i {
				t.Fatalf("key %x of node %d lies in range %d", key, i, int(key[0])*Nodes/256)
			}
			if seen[string(key)] {
				t.Fatalf("key %x twice", key)
			}
			seen[string(key)] = true
		}
	}
}

// TestSystems: the built systems and the hierarchy's slots.
func TestSystems(t *testing.T) {
	built := 0
	for _, s := range Systems() {
		if s.Built {
			built++
		}
		if got, ok := SystemByName(s.Name); !ok || got != s {
			t.Errorf("SystemByName(%q) = %+v, %v", s.Name, got, ok)
		}
	}
	if built != 8 || len(Systems()) != 8 {
		t.Errorf("%d systems, %d built; want 8, all built", len(Systems()), built)
	}
}

// TestReport: the table, the CSV and the PNG of two points.
func TestReport(t *testing.T) {
	ps := []Point{
		{System: "2pc-locking", Clients: 1, Txns: 100, Seconds: 10, Mean: 50 * time.Millisecond, P99: 90 * time.Millisecond, RPCsPerTxn: 27, ProtocolMessagesPerTxn: 32, ProtocolStepsPerTxn: 4,
			MeanBefore: 5 * time.Millisecond, MeanBody: 25 * time.Millisecond, MeanCommit: 20 * time.Millisecond,
			P99Before: 7 * time.Millisecond, P99Body: 40 * time.Millisecond, P99Commit: 30 * time.Millisecond},
		{System: "default", Clients: 1, Txns: 80, Seconds: 10, Mean: 60 * time.Millisecond, P99: 95 * time.Millisecond, RPCsPerTxn: 45},
	}
	var b bytes.Buffer
	WritePointTable(&b, ps)
	out := b.String()
	for _, want := range []string{"10.0", "32.0", "4.00 / 32.00", "default", "5.0/25.0/20.0", "before/body/commit ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	dir := t.TempDir()
	if err := WriteCSV(filepath.Join(dir, "h.csv"), "m", ps); err != nil {
		t.Fatal(err)
	}
	csv, _ := os.ReadFile(filepath.Join(dir, "h.csv"))
	if got := strings.Count(string(csv), "\n"); got != 3 {
		t.Errorf("CSV has %d lines, want 3:\n%s", got, csv)
	}
	if !strings.Contains(string(csv), ",5.000,25.000,20.000,7.000,40.000,30.000,m\n") {
		t.Errorf("CSV lacks the latency split (means, then each phase's p99) of the first point:\n%s", csv)
	}
	for _, a := range []Axis{AxisClients, AxisBatch, AxisShare} {
		if err := WritePlot(filepath.Join(dir, "h.png"), "t", "m", ps, a); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSystemByNameBatch: a hierarchy protocol takes any batch in [1,
// BatchMax]; other names and malformed batches are refused.
func TestSystemByNameBatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ok    bool
		proto client.Protocol
		batch int
	}{
		{"hierarchy-locking/b25", true, client.ProtocolHierarchyLocking, 25},
		{"hierarchy-timestamps/b100", true, client.ProtocolHierarchyTimestamps, 100},
		{"hierarchy-locking/b10", true, client.ProtocolHierarchyLocking, 10},
		{"hierarchy-locking/b1000", true, client.ProtocolHierarchyLocking, 1000},
		{"hierarchy-locking/b1001", false, "", 0},
		{"hierarchy-locking/b0", false, "", 0},
		{"hierarchy-locking/b07", false, "", 0},
		{"hierarchy-locking/b-1", false, "", 0},
		{"hierarchy-locking/b", false, "", 0},
		{"hierarchy-locking", false, "", 0},
		{"2pc-locking/b10", false, "", 0},
		{"default/b5", false, "", 0},
	} {
		s, ok := SystemByName(tc.name)
		if ok != tc.ok || (ok && (s.Protocol != tc.proto || s.Batch != tc.batch || s.Name != tc.name || !s.Built)) {
			t.Errorf("SystemByName(%q) = %+v, %v", tc.name, s, ok)
		}
	}
}

// TestExpandSystems: --systems with and without a --batch-sizes sweep.
func TestExpandSystems(t *testing.T) {
	names := func(ss []System) string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		systems []string
		batches []int
		want    string // "" with wantErr
		wantErr bool
	}{
		{[]string{"2pc-locking", "hierarchy-locking/b10"}, nil, "2pc-locking,hierarchy-locking/b10", false},
		{[]string{"hierarchy-locking/b25"}, nil, "hierarchy-locking/b25", false},
		{[]string{"hierarchy-locking", "hierarchy-timestamps/b10", "2pc-locking"}, []int{1, 25, 100},
			"hierarchy-locking/b1,hierarchy-locking/b25,hierarchy-locking/b100,hierarchy-timestamps/b1,hierarchy-timestamps/b25,hierarchy-timestamps/b100,2pc-locking", false},
		{[]string{"hierarchy-locking"}, nil, "", true},
		{[]string{"nope"}, nil, "", true},
		{[]string{"hierarchy-locking/b10", "hierarchy-locking/b10"}, nil, "", true},
		{[]string{"hierarchy-locking", "hierarchy-locking/b5"}, []int{5}, "", true},
		{[]string{"hierarchy-locking"}, []int{0}, "", true},
		{[]string{"hierarchy-locking"}, []int{BatchMax + 1}, "", true},
	} {
		got, err := ExpandSystems(tc.systems, tc.batches)
		if (err != nil) != tc.wantErr || (err == nil && names(got) != tc.want) {
			t.Errorf("ExpandSystems(%v, %v) = %q, %v; want %q, error %v", tc.systems, tc.batches, names(got), err, tc.want, tc.wantErr)
		}
	}
}

// TestValidateShare: shares in [0, 1]; local transactions need
// UpdatesPerTxn objects per node.
func TestValidateShare(t *testing.T) {
	k := Keyspace{Objects: 8000}
	for _, sh := range []float64{0, 0.5, 1} {
		if err := k.ValidateShare(sh); err != nil {
			t.Errorf("share %v: %v", sh, err)
		}
	}
	for _, sh := range []float64{-0.1, 1.1} {
		if err := k.ValidateShare(sh); err == nil {
			t.Errorf("share %v accepted", sh)
		}
	}
	small := Keyspace{Objects: Nodes * (UpdatesPerTxn - 1)}
	if err := small.ValidateShare(1); err != nil {
		t.Errorf("all distributed on a small keyspace: %v", err)
	}
	if err := small.ValidateShare(0.5); err == nil {
		t.Error("local transactions accepted with fewer than UpdatesPerTxn objects per node")
	}
}

// TestShareRatios: each local point at a share above 0 is paired with the
// local point at share 0 of the same system, clients and round.
func TestShareRatios(t *testing.T) {
	lp := func(sys string, round int, share float64, p99 time.Duration) Point {
		return Point{System: sys, Clients: 100, Round: round, Share: share, Class: ClassLocal, Txns: 10, P99: p99, Mean: p99 / 2}
	}
	ps := []Point{
		lp("a", 0, 0, 100*time.Millisecond),
		{System: "a", Clients: 100, Share: 0.5, Class: ClassDistributed, P99: time.Second},
		lp("a", 0, 0.5, 108*time.Millisecond),
		lp("b", 0, 0, 100*time.Millisecond),
		lp("b", 0, 0.5, 150*time.Millisecond),
		lp("a", 1, 0.5, 90*time.Millisecond),                                                  // no base in round 1
		{System: "c", Clients: 100, Share: 0, Class: ClassLocal},                              // no commit: no base
		{System: "c", Clients: 100, Share: 0.5, Class: ClassLocal, Txns: 3, P99: time.Second}, // left out
	}
	rs := ShareRatios(ps)
	if len(rs) != 2 {
		t.Fatalf("%d ratios, want 2: %+v", len(rs), rs)
	}
	if rs[0].System != "a" || rs[0].P99Ratio() != 1.08 || rs[1].System != "b" || rs[1].P99Ratio() != 1.5 || rs[1].MeanRatio() != 1.5 {
		t.Errorf("ratios %+v", rs)
	}
	var b bytes.Buffer
	WritePointTable(&b, ps[6:7])
	if !strings.Contains(b.String(), " -  ") {
		t.Errorf("a point without commits shows a latency:\n%s", b.String())
	}
	b.Reset()
	WriteShareRatios(&b, rs, 0.10)
	if out := b.String(); !strings.Contains(out, "yes (+8%)") || !strings.Contains(out, "no (+50%)") {
		t.Errorf("verdicts:\n%s", out)
	}
}

// TestAxisPlace: each plot axis puts a point at its x value on its line:
// clients, batch size (systems without a batch have no place there) and
// the distributed share in percent.
func TestAxisPlace(t *testing.T) {
	h := Point{System: "hierarchy-locking/b10", Clients: 50, Share: 0.5, Class: ClassLocal, Round: 1}
	p2 := Point{System: "2pc-locking", Clients: 50, Share: 1, Class: ClassDistributed}
	for _, tc := range []struct {
		a         Axis
		p         Point
		showShare bool
		showRound bool
		x         float64
		series    string
		ok        bool
	}{
		{AxisClients, h, false, false, 50, "hierarchy-locking/b10", true},
		{AxisClients, h, true, true, 50, "hierarchy-locking/b10 share 0.5 local r1", true},
		{AxisBatch, h, false, false, 10, "hierarchy-locking local", true},
		{AxisBatch, p2, false, false, 0, "", false},
		{AxisShare, h, false, false, 50, "hierarchy-locking/b10 local", true},
		{AxisShare, p2, false, false, 100, "2pc-locking distributed", true},
	} {
		x, series, ok := tc.a.place(tc.p, tc.showShare, tc.showRound)
		if x != tc.x || series != tc.series || ok != tc.ok {
			t.Errorf("axis %d, %s: place = %v %q %v, want %v %q %v", tc.a, tc.p.System, x, series, ok, tc.x, tc.series, tc.ok)
		}
	}
}

// TestDisjointObjects: with Disjoint, no two clients ever pick the same
// object of a node, and each client's picks stay within range; the
// validation refuses too few objects per client.
func TestDisjointObjects(t *testing.T) {
	k := Keyspace{Objects: 8 * 100}
	const clients = 12
	owner := map[int]int{}
	rng := rand.New(rand.NewPCG(1, 2))
	for c := 0; c < clients; c++ {
		from := objects{perNode: k.PerNode(), client: c, clients: clients}
		for i := 0; i < 1000; i++ {
			j := from.pick(rng)
			if j < 0 || j >= k.PerNode() {
				t.Fatalf("client %d picked object %d, outside [0, %d)", c, j, k.PerNode())
			}
			if o, ok := owner[j]; ok && o != c {
				t.Fatalf("object %d picked by clients %d and %d", j, o, c)
			}
			owner[j] = c
		}
	}
	if len(owner) != clients*(k.PerNode()/clients) {
		t.Errorf("%d objects picked, want every client's %d", len(owner), k.PerNode()/clients)
	}
	if err := k.ValidateDisjoint(100, 1); err != nil {
		t.Errorf("100 clients, 100 objects per node, distributed only: %v", err)
	}
	if err := k.ValidateDisjoint(101, 1); err == nil {
		t.Error("101 clients, 100 objects per node: accepted")
	}
	if err := k.ValidateDisjoint(13, 0.5); err == nil {
		t.Error("13 clients, 7 objects each, local transactions of 8 objects: accepted")
	}
}

// TestSystemRatios: each system's point is compared with the baseline's
// of the same clients, share, class and round, and with nothing else.
func TestSystemRatios(t *testing.T) {
	pt := func(sys string, clients, round int, txns int64) Point {
		return Point{System: sys, Clients: clients, Share: 1, Class: ClassDistributed, Round: round, Txns: txns, Seconds: 10}
	}
	ps := []Point{pt(Baseline, 10, 0, 100), pt(Baseline, 10, 1, 200), pt("hierarchy-locking/b10", 10, 0, 150),
		pt("hierarchy-locking/b10", 10, 1, 100), pt("hierarchy-locking/b10", 50, 0, 100)}
	rs := SystemRatios(ps)
	if len(rs) != 2 {
		t.Fatalf("%d ratios, want 2 (the 50-client point has no baseline): %+v", len(rs), rs)
	}
	if got := rs[0].Ratio(); got != 1.5 {
		t.Errorf("round 0 ratio %v, want 1.5", got)
	}
	if got := rs[1].Ratio(); got != 0.5 {
		t.Errorf("round 1 ratio %v, want 0.5", got)
	}
	var b bytes.Buffer
	WriteSystemRatios(&b, rs)
	if !strings.Contains(b.String(), "1.50x") {
		t.Errorf("table lacks 1.50x:\n%s", b.String())
	}
}

// TestDelayerRealized: each delayed call sleeps twice (there and back),
// and the realized time summed is at least what was asked.
func TestDelayerRealized(t *testing.T) {
	var d Delayer
	d.SetOneWay(200 * time.Microsecond)
	call := d.Interceptor()
	for i := 0; i < 3; i++ {
		err := call(context.Background(), "/m", nil, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
	}
	n, slept := d.Realized()
	if n != 6 || d.Calls() != 3 {
		t.Fatalf("sleeps %d, calls %d: want 6 and 3", n, d.Calls())
	}
	if slept < 6*200*time.Microsecond {
		t.Fatalf("realized %v in all, less than the 1.2ms asked", slept)
	}
}
