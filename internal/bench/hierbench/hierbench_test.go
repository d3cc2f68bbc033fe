package hierbench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		{System: "2pc-locking", Clients: 1, Txns: 100, Seconds: 10, Mean: 50 * time.Millisecond, P99: 90 * time.Millisecond, RPCsPerTxn: 27, ProtocolMessagesPerTxn: 32, ProtocolStepsPerTxn: 4},
		{System: "default", Clients: 1, Txns: 80, Seconds: 10, Mean: 60 * time.Millisecond, P99: 95 * time.Millisecond, RPCsPerTxn: 45},
	}
	var b bytes.Buffer
	WritePointTable(&b, ps)
	out := b.String()
	for _, want := range []string{"10.0", "32.0", "4.00 / 32.00", "default"} {
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
	if err := WritePlot(filepath.Join(dir, "h.png"), "t", "m", ps); err != nil {
		t.Fatal(err)
	}
}
