package plot

import (
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestNiceStep(t *testing.T) {
	for _, tc := range []struct{ raw, want float64 }{
		{0.7, 1}, {1, 1}, {1.2, 2}, {2.1, 2.5}, {3, 5}, {6, 10}, {120, 200}, {2500, 2500}, {0.03, 0.05}, {0, 1},
	} {
		if got := niceStep(tc.raw); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("niceStep(%v) = %v, want %v", tc.raw, got, tc.want)
		}
	}
}

func TestFormatTick(t *testing.T) {
	for _, tc := range []struct {
		v, step float64
		want    string
	}{
		{0, 1, "0"}, {2000, 500, "2000"}, {20000, 5000, "20k"}, {2500000, 500000, "2.5M"},
		{0.3, 0.1, "0.3"}, {0.75, 0.25, "0.75"}, {64, 1, "64"},
	} {
		if got := formatTick(tc.v, tc.step); got != tc.want {
			t.Errorf("formatTick(%v, %v) = %q, want %q", tc.v, tc.step, got, tc.want)
		}
	}
}

// countColor counts the pixels of img that have exactly the colour of
// series i.
func countColor(img *image.RGBA, i int) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if img.RGBAAt(x, y) == Palette[i] {
				n++
			}
		}
	}
	return n
}

func TestGridDrawsEverySeriesAndRoundTrips(t *testing.T) {
	line := LineChart{
		Title: "throughput", XLabel: "concurrency", YLabel: "ops/s", LogX: true,
		Series: []Series{
			{Name: "put", X: []float64{1, 4, 16, 64}, Y: []float64{100, 350, 900, 1200}},
			{Name: "get", X: []float64{1, 4, 16, 64}, Y: []float64{400, 1500, math.NaN(), 5000}},
			{Name: "get, dashed", X: []float64{1, 4, 16, 64}, Y: []float64{300, 1000, 2000, 4000}, Color: Palette[1], Dashed: true},
		},
	}
	bar := BarChart{
		Title: "p99", YLabel: "ms", Groups: []string{"a", "b"}, ValueLabels: true,
		Series: []BarSeries{{Name: "x", Values: []float64{1.5, 3}}, {Name: "y", Values: []float64{2, 0}}, {Name: "z", Values: []float64{4, 1}}},
	}
	hidden := line
	hidden.HideLegend = true
	img := Grid("title", "machine", 2, 400, 300, line, bar, hidden, Legend{Title: "legend", Series: line.Series})
	if got, want := img.Bounds().Dx(), 800; got != want {
		t.Fatalf("width %d, want %d", got, want)
	}
	for i := 0; i < 3; i++ {
		if countColor(img, i) < 50 {
			t.Errorf("series %d (colour %v) barely drawn: %d pixels", i, Palette[i], countColor(img, i))
		}
	}
	path := filepath.Join(t.TempDir(), "p.png")
	if err := WritePNG(path, img); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	back, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if back.Bounds() != img.Bounds() {
		t.Fatalf("decoded bounds %v, want %v", back.Bounds(), img.Bounds())
	}
	if os.Getenv("PLOT_KEEP") != "" {
		_ = WritePNG(os.Getenv("PLOT_KEEP"), img)
	}
}

func TestEmptyAndDegenerate(t *testing.T) {
	// No data, a single point, all zeros: drawn without panicking.
	Grid("", "", 3, 300, 200,
		LineChart{},
		LineChart{Series: []Series{{Name: "one", X: []float64{5}, Y: []float64{0}}}},
		BarChart{Groups: []string{"g"}, Series: []BarSeries{{Name: "zero", Values: []float64{0}}}},
	)
}

func TestShapeMismatchPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a series with more x than y values")
		}
	}()
	Grid("", "", 1, 300, 200, LineChart{Series: []Series{{X: []float64{1, 2}, Y: []float64{1}}}})
}
