package pipelinebench

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func TestFitLine(t *testing.T) {
	for _, tc := range []struct {
		name             string
		xs, ys           []float64
		slope, intercept float64
	}{
		{"exact", []float64{0, 10, 20, 30}, []float64{5, 65, 125, 185}, 6, 5},
		{"flat", []float64{1, 2, 4, 8}, []float64{3, 3, 3, 3}, 0, 3},
		// Scattered points: sxy / sxx = 8 / 5, through the means (1.5, 4).
		{"noisy", []float64{0, 1, 2, 3}, []float64{2, 2, 6, 6}, 1.6, 1.6},
		{"two points", []float64{1, 256}, []float64{10, 265}, 1, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, i, err := FitLine(tc.xs, tc.ys)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(s-tc.slope) > 1e-9 || math.Abs(i-tc.intercept) > 1e-9 {
				t.Fatalf("FitLine = %v, %v; want %v, %v", s, i, tc.slope, tc.intercept)
			}
		})
	}
	for _, bad := range [][2][]float64{
		{{1}, {1}},
		{{2, 2, 2}, {1, 2, 3}},
		{{1, 2}, {1}},
		{nil, nil},
	} {
		if _, _, err := FitLine(bad[0], bad[1]); err == nil {
			t.Errorf("FitLine(%v, %v): no error", bad[0], bad[1])
		}
	}
}

// points builds, for each mode, a line of latency = k x RTT + 4 ms over
// round trips 0, 10, 20, with k the model's slope.
func points() []Point {
	var ps []Point
	for _, m := range Modes {
		k := References[m.Name].RTTSlopeModel
		for _, rtt := range []float64{0, 10, 20} {
			lat := time.Duration((k*rtt + 4) * float64(time.Millisecond))
			ps = append(ps, Point{Mode: m.Name, RTTMs: rtt, Reads: 4, Writes: 5, Txns: 10,
				Mean: lat, P50: lat, P99: lat, Max: lat,
				ConsensusRounds: k, ConsensusRoundsMin: int64(k), ConsensusRoundsMax: int64(k)})
		}
	}
	return ps
}

func TestFitModesAndSummary(t *testing.T) {
	fits, err := FitModes(points(), RTTX)
	if err != nil {
		t.Fatal(err)
	}
	if len(fits) != len(Modes) {
		t.Fatalf("%d fits, want %d", len(fits), len(Modes))
	}
	for i, f := range fits {
		want := References[Modes[i].Name].RTTSlopeModel
		if f.Mode != Modes[i].Name || math.Abs(f.SlopeMean-want) > 1e-9 || math.Abs(f.SlopeP50-want) > 1e-9 ||
			math.Abs(f.InterceptMean-4) > 1e-9 || f.Points != 3 || f.Rounds != want {
			t.Errorf("fit %d = %+v, want mode %s slope %v intercept 4 rounds %v", i, f, Modes[i].Name, want, want)
		}
	}
	var b bytes.Buffer
	WriteRTTSummary(&b, fits)
	got := b.String()
	for _, want := range []string{
		"off             3           6.00          6.00          4.00               6      6     6.00",
		"pipelined       3           2.00          2.00          4.00               2      2     2.00",
		"parallel        3           1.00          1.00          4.00  (not measured)      1     1.00",
		"slope <= 1.5 with pipelining and parallel commits: met (1.00)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}

	// A parallel line above the target is reported as missed, by how much.
	fits[2].SlopeMean = 1.75
	b.Reset()
	WriteRTTSummary(&b, fits)
	if want := "MISSED by 0.25 (1.75)"; !strings.Contains(b.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, b.String())
	}
}

func TestPointTable(t *testing.T) {
	ps := points()
	ps[0].ConsensusRoundsMax = 7 // rounds differed between transactions
	ps[len(ps)-1].RealRTT = 21500 * time.Microsecond
	var b bytes.Buffer
	WritePointTable(&b, ps)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 1+len(ps) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), 1+len(ps), b.String())
	}
	for _, want := range []string{
		" rtt ms rtt real writes mode       txns failed    p50 ms   mean ms    p99 ms   rounds",
		"      0     0.00      5 off          10      0      4.00      4.00      4.00    6.00*",
		"     20    21.50      5 parallel     10      0     24.00     24.00     24.00     1.00",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestValidate(t *testing.T) {
	if err := NewOrder.Validate(); err != nil {
		t.Error(err)
	}
	for _, s := range []Shape{{Reads: 0, Writes: 0}, {Reads: -1, Writes: 1}, {Writes: WritesMax + 1}} {
		if s.Validate() == nil {
			t.Errorf("%+v: no error", s)
		}
	}
	if (Keyspace{Ranges: RangesMax + 1, ReadKeysPerRange: 1}).Validate() == nil {
		t.Error("too many ranges: no error")
	}
	if (Limits{Duration: time.Second, TxnsMax: 0}).Validate() == nil {
		t.Error("no transactions: no error")
	}
	// Statement i lands in range i mod Ranges: the first byte of the key is
	// the first byte of that range's split key.
	k := Keyspace{Ranges: 8, ReadKeysPerRange: 1}
	for i, want := range []byte{0, 32, 64, 224, 0} {
		st := []int{0, 1, 2, 7, 8}[i]
		if got := k.rangeKey(st, 'w', 1)[0]; got != want {
			t.Errorf("statement %d: first byte %d, want %d", st, got, want)
		}
	}
}

func TestCSVRoundTrip(t *testing.T) {
	ps := points()
	ps[1].ReadIndexRounds, ps[1].OracleReadIndexRounds, ps[1].Elapsed, ps[1].CPU = 1.25, 0.5, 1500*time.Millisecond, 2500*time.Microsecond
	path := t.TempDir() + "/p.csv"
	if err := WriteCSV(path, "rtt", "test machine", ps); err != nil {
		t.Fatal(err)
	}
	got, machine, err := ReadCSV(path)
	if err != nil {
		t.Fatal(err)
	}
	if machine != "test machine" || len(got) != len(ps) {
		t.Fatalf("read %d points on %q, want %d on %q", len(got), machine, len(ps), "test machine")
	}
	for i := range ps {
		if got[i] != ps[i] {
			t.Errorf("point %d: read %+v, wrote %+v", i, got[i], ps[i])
		}
	}
}
