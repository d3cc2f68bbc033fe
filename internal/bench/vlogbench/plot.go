package vlogbench

import (
	"math"

	"github.com/canopy-db/canopy/internal/bench/plot"
)

// The charts are drawn by package plot, shared with the other benchmarks.

type series struct {
	name string
	xs   []float64
	ys   []float64
}

// plotLines draws series against a log x axis (ticks at xs) and a linear y
// axis from 0, and writes a PNG to path. Points whose y is not a number
// (no run at that size) are left out.
func plotLines(path, title, xLabel, yLabel string, xs []float64, ss []series) error {
	c := plot.LineChart{XLabel: xLabel, YLabel: yLabel, LogX: true, XTicks: xs}
	for _, s := range ss {
		ps := plot.Series{Name: s.name}
		for i, y := range s.ys {
			if !math.IsNaN(y) && !math.IsInf(y, 0) {
				ps.X = append(ps.X, s.xs[i])
				ps.Y = append(ps.Y, y)
			}
		}
		c.Series = append(c.Series, ps)
	}
	return plot.WritePNG(path, plot.Grid(title, "", 1, 900, 520, c))
}

// WritePlots writes the Case 1 plots (write amplification, space
// amplification, updates per second against value size, one line per
// mode) and the Case 2 plot (punch/rewrite bytes written against update
// volume) into dir, and returns the paths written.
func WritePlots(dir string, rs []Result) ([]string, error) {
	var paths []string
	var sizes []int
	seen := map[int]bool{}
	var modes []string
	seenMode := map[string]bool{}
	for _, r := range rs {
		if r.Case != 1 {
			continue
		}
		if !seen[r.ValueBytes] {
			seen[r.ValueBytes] = true
			sizes = append(sizes, r.ValueBytes)
		}
		if !seenMode[r.Label()] {
			seenMode[r.Label()] = true
			modes = append(modes, r.Label())
		}
	}
	if len(sizes) > 0 {
		xs := make([]float64, len(sizes))
		for i, s := range sizes {
			xs[i] = float64(s)
		}
		for _, m := range []struct {
			file, title, yLabel string
			f                   func(Result) float64
		}{
			{"case1_write_amp.png", "case 1: write amplification vs value size", "engine bytes / user bytes", Result.WriteAmp},
			{"case1_space_amp.png", "case 1: space amplification at end vs value size", "allocated / live bytes", Result.SpaceAmp},
			{"case1_space_amp_settled.png", "case 1: space amplification after GC settled vs value size", "allocated / live bytes", Result.SpaceAmpSettled},
			{"case1_ops.png", "case 1: updates per second vs value size", "updates/s", Result.OpsPerSec},
		} {
			var ss []series
			for _, mode := range modes {
				s := series{name: mode, xs: xs}
				for _, size := range sizes {
					y := math.NaN()
					for _, r := range rs {
						if r.Case == 1 && r.ValueBytes == size && r.Label() == mode {
							y = m.f(r)
						}
					}
					s.ys = append(s.ys, y)
				}
				ss = append(ss, s)
			}
			p := dir + "/" + m.file
			if err := plotLines(p, m.title, "value size (bytes)", m.yLabel, xs, ss); err != nil {
				return paths, err
			}
			paths = append(paths, p)
		}
	}
	// Case 2.
	var xs, ys []float64
	for _, r := range rs {
		if r.Case != 2 || r.Label() != "rewrite" {
			continue
		}
		for _, p := range rs {
			if p.Case == 2 && p.Label() == "punch" && p.Updates == r.Updates && r.EngineWrittenBytes > 0 {
				xs = append(xs, float64(r.Updates)/float64(r.Records))
				ys = append(ys, float64(p.EngineWrittenBytes)/float64(r.EngineWrittenBytes))
			}
		}
	}
	if len(xs) > 0 {
		p := dir + "/case2_punch_over_rewrite.png"
		if err := plotLines(p, "case 2: bytes written, punch / rewrite, 64 KiB values", "updates / records", "punch / rewrite",
			xs, []series{{name: "punch/rewrite", xs: xs, ys: ys}}); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}
