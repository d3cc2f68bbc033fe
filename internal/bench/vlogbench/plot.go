package vlogbench

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strings"
)

// A minimal line chart written with image/png: no external tool. Text uses
// a built-in 3x5 pixel font (digits, upper-case letters, a few signs).

type series struct {
	name string
	xs   []float64
	ys   []float64
}

var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0x94, 0x67, 0xbd, 0xff}, {0xff, 0x7f, 0x0e, 0xff},
}

// plotLines draws series against a log2 x axis (labels xLabels at xs) and
// a linear y axis from 0, and writes a PNG to path.
func plotLines(path, title string, xs []float64, xLabels []string, ss []series) error {
	const W, H, left, right, top, bottom = 900, 520, 70, 20, 50, 60
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	fill(img, img.Bounds(), color.RGBA{255, 255, 255, 255})
	ymax := 0.0
	for _, s := range ss {
		for _, y := range s.ys {
			if !math.IsNaN(y) && !math.IsInf(y, 0) {
				ymax = math.Max(ymax, y)
			}
		}
	}
	if ymax == 0 {
		ymax = 1
	}
	ymax = niceCeil(ymax)
	xmin, xmax := math.Log2(xs[0]), math.Log2(xs[len(xs)-1])
	if xmax == xmin {
		xmax = xmin + 1
	}
	px := func(x float64) int {
		return left + int((math.Log2(x)-xmin)/(xmax-xmin)*float64(W-left-right-20)) + 10
	}
	py := func(y float64) int { return H - bottom - int(y/ymax*float64(H-top-bottom)) }
	black := color.RGBA{0, 0, 0, 255}
	grey := color.RGBA{0xdd, 0xdd, 0xdd, 255}
	for i := 0; i <= 5; i++ {
		y := ymax * float64(i) / 5
		line(img, left, py(y), W-right, py(y), grey)
		text(img, left-6-textWidth(fmtY(y)), py(y)-5, fmtY(y), black)
	}
	line(img, left, top, left, H-bottom, black)
	line(img, left, H-bottom, W-right, H-bottom, black)
	for i, x := range xs {
		line(img, px(x), H-bottom, px(x), H-bottom+5, black)
		text(img, px(x)-textWidth(xLabels[i])/2, H-bottom+10, xLabels[i], black)
	}
	text(img, left, 15, strings.ToUpper(title), black)
	for i, s := range ss {
		c := palette[i%len(palette)]
		prevX, prevY := -1, -1
		for j := range s.xs {
			if math.IsNaN(s.ys[j]) {
				continue
			}
			x, y := px(s.xs[j]), py(s.ys[j])
			fill(img, image.Rect(x-3, y-3, x+4, y+4), c)
			if prevX >= 0 {
				line(img, prevX, prevY, x, y, c)
				line(img, prevX, prevY+1, x, y+1, c)
			}
			prevX, prevY = x, y
		}
		lx := left + 20 + i*160
		fill(img, image.Rect(lx, H-22, lx+14, H-12), c)
		text(img, lx+20, H-23, strings.ToUpper(s.name), black)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fmtY(y float64) string {
	if y >= 100 {
		return fmt.Sprintf("%.0f", y)
	}
	if y >= 10 {
		return fmt.Sprintf("%.1f", y)
	}
	return fmt.Sprintf("%.2f", y)
}

func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}

func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	err := dx + dy
	for {
		if image.Pt(x0, y0).In(img.Bounds()) {
			img.SetRGBA(x0, y0, c)
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * err
		if e2 >= dy {
			err += dy
			x0 += sx
		}
		if e2 <= dx {
			err += dx
			y0 += sy
		}
	}
}

func abs(a int) int {
	if a < 0 {
		return -a
	}
	return a
}

func sign(a int) int {
	switch {
	case a < 0:
		return -1
	case a > 0:
		return 1
	}
	return 0
}

const glyphScale = 2

// font3x5: each glyph is 5 rows of 3 bits, written as 15 characters.
var font3x5 = map[rune]string{
	'0': "111101101101111", '1': "010110010010111", '2': "111001111100111", '3': "111001111001111",
	'4': "101101111001001", '5': "111100111001111", '6': "111100111101111", '7': "111001001010010",
	'8': "111101111101111", '9': "111101111001111", '.': "000000000000010", '-': "000000111000000",
	'/': "001001010100100", ':': "000010000010000", '(': "010100100100010", ')': "010001001001010",
	'=': "000111000111000", '+': "000010111010000", 'X': "101101010101101", ' ': "000000000000000",
	'A': "010101111101101", 'B': "110101110101110", 'C': "011100100100011", 'D': "110101101101110",
	'E': "111100110100111", 'F': "111100110100100", 'G': "011100101101011", 'H': "101101111101101",
	'I': "111010010010111", 'J': "001001001101010", 'K': "101101110101101", 'L': "100100100100111",
	'M': "101111111101101", 'N': "110101101101101", 'O': "010101101101010", 'P': "110101110100100",
	'Q': "010101101110011", 'R': "110101110101101", 'S': "011100010001110", 'T': "111010010010010",
	'U': "101101101101111", 'V': "101101101101010", 'W': "101101111111101", 'Y': "101101010010010",
	'Z': "111001010100111", '%': "101001010100101", ',': "000000000010100",
}

func textWidth(s string) int { return len(s) * 4 * glyphScale }

func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	for _, r := range strings.ToUpper(s) {
		g, ok := font3x5[r]
		if !ok {
			g = font3x5[' ']
		}
		for row := 0; row < 5; row++ {
			for col := 0; col < 3; col++ {
				if g[row*3+col] == '1' {
					fill(img, image.Rect(x+col*glyphScale, y+row*glyphScale, x+(col+1)*glyphScale, y+(row+1)*glyphScale), c)
				}
			}
		}
		x += 4 * glyphScale
	}
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
		labels := make([]string, len(sizes))
		for i, s := range sizes {
			xs[i] = float64(s)
			labels[i] = fmt.Sprintf("%dK", s>>10)
		}
		for _, m := range []struct {
			file, title string
			f           func(Result) float64
		}{
			{"case1_write_amp.png", "case 1: write amplification (engine bytes / user bytes) vs value size", Result.WriteAmp},
			{"case1_space_amp.png", "case 1: space amplification (allocated / live) at end vs value size", Result.SpaceAmp},
			{"case1_space_amp_settled.png", "case 1: space amplification after GC settled vs value size", Result.SpaceAmpSettled},
			{"case1_ops.png", "case 1: updates per second vs value size", Result.OpsPerSec},
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
			if err := plotLines(p, m.title, xs, labels, ss); err != nil {
				return paths, err
			}
			paths = append(paths, p)
		}
	}
	// Case 2.
	var xs, ys []float64
	var labels []string
	for _, r := range rs {
		if r.Case != 2 || r.Label() != "rewrite" {
			continue
		}
		for _, p := range rs {
			if p.Case == 2 && p.Label() == "punch" && p.Updates == r.Updates && r.EngineWrittenBytes > 0 {
				xs = append(xs, float64(r.Updates)/float64(r.Records))
				ys = append(ys, float64(p.EngineWrittenBytes)/float64(r.EngineWrittenBytes))
				labels = append(labels, fmt.Sprintf("%.0fX", float64(r.Updates)/float64(r.Records)))
			}
		}
	}
	if len(xs) > 0 {
		p := dir + "/case2_punch_over_rewrite.png"
		if err := plotLines(p, "case 2: bytes written punch / rewrite vs updates (x records), 64K values", xs, labels,
			[]series{{name: "punch/rewrite", xs: xs, ys: ys}}); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}
