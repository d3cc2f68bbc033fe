package plot

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"sort"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Series is one line of a LineChart: the points (X[i], Y[i]).
type Series struct {
	Name string
	X, Y []float64
	// Color overrides the series' palette colour (nil: Palette[i]).
	Color color.Color
	// Dashed draws the line dashed: with a shared Color, it tells apart
	// two variants of one workload.
	Dashed bool
}

// seriesColor is Color, or the palette's colour for series i.
func (s Series) seriesColor(i int) color.RGBA {
	if s.Color != nil {
		r, g, b, a := s.Color.RGBA()
		return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}
	}
	return Palette[i%len(Palette)]
}

// LineChart is one panel: a line per series, axes starting at zero.
type LineChart struct {
	Title, XLabel, YLabel string
	Series                []Series
	// LogX spaces x by log(x); points with x <= 0 are then skipped.
	LogX bool
	// XTicks are the x values to label. Nil: the distinct x values of the
	// series when there are at most xTicksDistinctMax of them, else evenly
	// spaced round values.
	XTicks []float64
	// HideLegend leaves the legend out of the plot area, where it may
	// cover lines; give a Legend panel of the same series instead.
	HideLegend bool
}

// Legend is a panel holding only the legend of the series (names, colours
// and dashes; their points are ignored), for a Grid of charts sharing it.
type Legend struct {
	Title  string
	Series []Series
}

// Draw draws the legend into r of dst, top-left, one entry per line.
func (l Legend) Draw(dst *image.RGBA, r image.Rectangle) {
	entries := make([]legendEntry, len(l.Series))
	for i, s := range l.Series {
		entries[i] = legendEntry{name: s.Name, color: s.seriesColor(i), dashed: s.Dashed}
	}
	y := r.Min.Y + marginTop
	if l.Title != "" {
		drawText(dst, r.Min.X+marginLeft, y+lineBytes, l.Title, black)
		y += lineBytes + 8
	}
	drawLegend(dst, image.Rect(r.Min.X+marginLeft-8, y, r.Max.X, r.Max.Y), entries)
}

// BarSeries is one bar per group of a BarChart, in the order of Groups.
type BarSeries struct {
	Name   string
	Values []float64
}

// BarChart is one panel: for each group, a bar per series side by side.
type BarChart struct {
	Title, XLabel, YLabel string
	Groups                []string
	Series                []BarSeries
	// ValueLabels prints each bar's value above it when it fits.
	ValueLabels bool
}

// Panel is a chart that draws itself into a rectangle of an image.
type Panel interface {
	Draw(dst *image.RGBA, r image.Rectangle)
}

// Palette is the series colours, in order (Tableau 10); series beyond it
// reuse colours from the start.
var Palette = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
	{188, 189, 34, 255}, {23, 190, 207, 255},
}

var (
	black     = color.RGBA{0, 0, 0, 255}
	gridGray  = color.RGBA{225, 225, 225, 255}
	textGray  = color.RGBA{70, 70, 70, 255}
	white     = color.RGBA{255, 255, 255, 255}
	face      = basicfont.Face7x13
	charWidth = 7
	lineBytes = 13 // height of one text line in pixels
)

const (
	xTicksDistinctMax = 12
	yTicksTarget      = 5
	marginLeft        = 72
	marginRight       = 16
	marginTop         = 26
	marginBottom      = 42
)

// Grid lays panels out cols to a row, each panelW x panelH pixels, under a
// header with title and, if not empty, subtitle (for example the machine
// the figures come from).
func Grid(title, subtitle string, cols, panelW, panelH int, panels ...Panel) *image.RGBA {
	if cols < 1 || panelW < 200 || panelH < 150 {
		panic(fmt.Sprintf("plot: Grid needs cols >= 1 and panels of at least 200x150 pixels, got %d, %dx%d", cols, panelW, panelH))
	}
	rows := (len(panels) + cols - 1) / cols
	header := 8
	if title != "" {
		header += lineBytes + 6
	}
	if subtitle != "" {
		header += lineBytes + 4
	}
	img := image.NewRGBA(image.Rect(0, 0, cols*panelW, header+max(rows, 1)*panelH))
	draw.Draw(img, img.Bounds(), image.NewUniform(white), image.Point{}, draw.Src)
	y := 4 + lineBytes
	if title != "" {
		drawText(img, (img.Bounds().Dx()-textWidth(title))/2, y, title, black)
		y += lineBytes + 6
	}
	if subtitle != "" {
		drawText(img, (img.Bounds().Dx()-textWidth(subtitle))/2, y, subtitle, textGray)
	}
	for i, p := range panels {
		x0, y0 := (i%cols)*panelW, header+(i/cols)*panelH
		p.Draw(img, image.Rect(x0, y0, x0+panelW, y0+panelH))
	}
	return img
}

// WritePNG writes img to path as a PNG file.
func WritePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		_ = f.Close()
		return fmt.Errorf("plot: encoding %s: %w", path, err)
	}
	return f.Close()
}

// Draw draws the chart into r of dst.
func (c LineChart) Draw(dst *image.RGBA, r image.Rectangle) {
	for _, s := range c.Series {
		if len(s.X) != len(s.Y) {
			panic(fmt.Sprintf("plot: series %q has %d x values and %d y values", s.Name, len(s.X), len(s.Y)))
		}
	}
	pa := plotArea(r)
	usable := func(x, y float64) bool { return finite(x) && finite(y) && (!c.LogX || x > 0) }
	ymax := 0.0
	var xs []float64
	for _, s := range c.Series {
		for i := range s.X {
			if usable(s.X[i], s.Y[i]) {
				ymax = math.Max(ymax, s.Y[i])
				xs = append(xs, s.X[i])
			}
		}
	}
	xt := c.XTicks
	if xt == nil {
		xt = distinct(xs)
		if len(xt) > xTicksDistinctMax {
			xt = linearTicks(xt[0], xt[len(xt)-1], 6)
		}
	}
	tx := func(x float64) float64 { return x }
	if c.LogX {
		tx = math.Log
		xt = filter(xt, func(v float64) bool { return v > 0 })
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range append(append([]float64(nil), xs...), xt...) {
		lo, hi = math.Min(lo, tx(v)), math.Max(hi, tx(v))
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	if hi == lo {
		lo, hi = lo-1, hi+1
	}
	pad := (hi - lo) * 0.06
	lo, hi = lo-pad, hi+pad
	px := func(x float64) int {
		return pa.Min.X + int(math.Round((tx(x)-lo)/(hi-lo)*float64(pa.Dx()-1)))
	}
	py := drawFrame(dst, r, pa, c.Title, c.XLabel, c.YLabel, ymax)
	for _, v := range xt {
		x := px(v)
		drawLine(dst, x, pa.Max.Y, x, pa.Max.Y+4, black, 1)
		l := formatTick(v, 1)
		drawText(dst, x-textWidth(l)/2, pa.Max.Y+6+lineBytes, l, black)
	}
	for i, s := range c.Series {
		col := s.seriesColor(i)
		type pt struct{ x, y int }
		var pts []pt
		for j := range s.X {
			if usable(s.X[j], s.Y[j]) {
				pts = append(pts, pt{px(s.X[j]), py(s.Y[j])})
			}
		}
		sort.SliceStable(pts, func(a, b int) bool { return pts[a].x < pts[b].x })
		for j := 1; j < len(pts); j++ {
			drawLineDashed(dst, pts[j-1].x, pts[j-1].y, pts[j].x, pts[j].y, col, 2, s.Dashed)
		}
		for _, p := range pts {
			if s.Dashed { // hollow marker
				outline(dst, image.Rect(p.x-3, p.y-3, p.x+4, p.y+4), col)
				outline(dst, image.Rect(p.x-2, p.y-2, p.x+3, p.y+3), col)
			} else {
				fillRect(dst, image.Rect(p.x-3, p.y-3, p.x+4, p.y+4), col)
			}
		}
	}
	if c.HideLegend {
		return
	}
	entries := make([]legendEntry, len(c.Series))
	for i, s := range c.Series {
		entries[i] = legendEntry{name: s.Name, color: s.seriesColor(i), dashed: s.Dashed}
	}
	drawLegend(dst, pa, entries)
}

type legendEntry struct {
	name   string
	color  color.RGBA
	dashed bool
}

// Draw draws the chart into r of dst.
func (c BarChart) Draw(dst *image.RGBA, r image.Rectangle) {
	for _, s := range c.Series {
		if len(s.Values) != len(c.Groups) {
			panic(fmt.Sprintf("plot: bar series %q has %d values for %d groups", s.Name, len(s.Values), len(c.Groups)))
		}
	}
	pa := plotArea(r)
	ymax := 0.0
	for _, s := range c.Series {
		for _, v := range s.Values {
			if finite(v) {
				ymax = math.Max(ymax, v)
			}
		}
	}
	py := drawFrame(dst, r, pa, c.Title, c.XLabel, c.YLabel, ymax)
	if len(c.Groups) == 0 || len(c.Series) == 0 {
		return
	}
	groupW := float64(pa.Dx()) / float64(len(c.Groups))
	barW := groupW * 0.8 / float64(len(c.Series))
	for g, name := range c.Groups {
		gx := float64(pa.Min.X) + groupW*float64(g)
		l := name
		if w := int(groupW) - 4; textWidth(l) > w && w > 2*charWidth {
			l = l[:w/charWidth-1] + "~"
		}
		drawText(dst, int(gx+groupW/2)-textWidth(l)/2, pa.Max.Y+6+lineBytes, l, black)
		for i, s := range c.Series {
			v := s.Values[g]
			if !finite(v) || v < 0 {
				continue
			}
			x0 := int(math.Round(gx + groupW*0.1 + barW*float64(i)))
			x1 := int(math.Round(gx + groupW*0.1 + barW*float64(i+1)))
			fillRect(dst, image.Rect(x0+1, py(v), x1, pa.Max.Y), Palette[i%len(Palette)])
			if lbl := formatValue(v); c.ValueLabels && textWidth(lbl) <= x1-x0+charWidth {
				drawText(dst, (x0+x1)/2-textWidth(lbl)/2, py(v)-3, lbl, textGray)
			}
		}
	}
	entries := make([]legendEntry, len(c.Series))
	for i, s := range c.Series {
		entries[i] = legendEntry{name: s.Name, color: Palette[i%len(Palette)]}
	}
	drawLegend(dst, pa, entries)
}

func plotArea(r image.Rectangle) image.Rectangle {
	return image.Rect(r.Min.X+marginLeft, r.Min.Y+marginTop, r.Max.X-marginRight, r.Max.Y-marginBottom)
}

// drawFrame draws the title, axis labels, y grid and axes, and returns the
// mapping of a y value to a pixel row (y from zero to a round value at or
// above ymax).
func drawFrame(dst *image.RGBA, r, pa image.Rectangle, title, xLabel, yLabel string, ymax float64) func(float64) int {
	if ymax <= 0 {
		ymax = 1
	}
	ymax *= 1.05 // headroom for value labels and markers at the top
	step := niceStep(ymax / yTicksTarget)
	top := math.Ceil(ymax/step) * step
	py := func(y float64) int {
		return pa.Max.Y - 1 - int(math.Round(y/top*float64(pa.Dy()-1)))
	}
	for i := 0; float64(i)*step <= top*(1+1e-9); i++ {
		v := float64(i) * step
		y := py(v)
		drawLine(dst, pa.Min.X, y, pa.Max.X-1, y, gridGray, 1)
		l := formatTick(v, step)
		drawText(dst, pa.Min.X-6-textWidth(l), y+lineBytes/2-2, l, black)
	}
	drawLine(dst, pa.Min.X, pa.Min.Y, pa.Min.X, pa.Max.Y-1, black, 1)
	drawLine(dst, pa.Min.X, pa.Max.Y-1, pa.Max.X-1, pa.Max.Y-1, black, 1)
	drawText(dst, (pa.Min.X+pa.Max.X)/2-textWidth(title)/2, r.Min.Y+lineBytes+4, title, black)
	drawText(dst, (pa.Min.X+pa.Max.X)/2-textWidth(xLabel)/2, r.Max.Y-8, xLabel, textGray)
	drawTextUp(dst, r.Min.X+4, (pa.Min.Y+pa.Max.Y)/2+textWidth(yLabel)/2, yLabel, textGray)
	return py
}

// drawLegend draws a box with one coloured sample and name per series in
// the top-left corner of the plot area.
func drawLegend(dst *image.RGBA, pa image.Rectangle, entries []legendEntry) {
	if len(entries) == 0 {
		return
	}
	w := 0
	for _, e := range entries {
		w = max(w, textWidth(e.name))
	}
	const sample = 20 // pixels of line sample
	box := image.Rect(pa.Min.X+8, pa.Min.Y+4, pa.Min.X+8+w+sample+16, pa.Min.Y+4+len(entries)*(lineBytes+3)+6)
	fillRect(dst, box, white)
	outline(dst, box, gridGray)
	for i, e := range entries {
		y := box.Min.Y + 4 + i*(lineBytes+3)
		if e.dashed {
			drawLineDashed(dst, box.Min.X+5, y+8, box.Min.X+5+sample, y+8, e.color, 2, true)
		} else {
			fillRect(dst, image.Rect(box.Min.X+5, y+4, box.Min.X+5+sample, y+12), e.color)
		}
		drawText(dst, box.Min.X+10+sample, y+lineBytes-2, e.name, black)
	}
}

// niceStep returns the smallest of 1, 2, 2.5 or 5 times a power of ten at
// or above raw.
func niceStep(raw float64) float64 {
	if raw <= 0 || !finite(raw) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= raw*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// formatTick prints v with as many decimals as step needs, and large
// values with k or M.
func formatTick(v, step float64) string {
	switch {
	case v != 0 && math.Abs(v) >= 1e6 && math.Mod(v, 1e5) == 0:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v != 0 && math.Abs(v) >= 1e4 && math.Mod(v, 100) == 0:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	decimals := 0
	if step > 0 && step < 1 {
		decimals = int(math.Ceil(-math.Log10(step) - 1e-9))
		if s := step * math.Pow(10, float64(decimals)); math.Abs(s-math.Round(s)) > 1e-9 {
			decimals++ // 2.5 x 10^-k
		}
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// formatValue prints a measured value with three significant digits
// (never fewer than the integer part).
func formatValue(v float64) string {
	if math.Abs(v) >= 100 {
		return strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func linearTicks(lo, hi float64, n int) []float64 {
	step := niceStep((hi - lo) / float64(n))
	var ts []float64
	for v := math.Ceil(lo/step) * step; v <= hi*(1+1e-9); v += step {
		ts = append(ts, v)
	}
	return ts
}

func distinct(xs []float64) []float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func filter(xs []float64, keep func(float64) bool) []float64 {
	var out []float64
	for _, v := range xs {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func textWidth(s string) int { return len(s) * charWidth }

// drawText draws s with its baseline at y.
func drawText(dst *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: dst, Src: image.NewUniform(c), Face: face, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// drawTextUp draws s rotated a quarter turn anticlockwise, reading
// upwards from (x, y); x is the left edge of the rotated text.
func drawTextUp(dst *image.RGBA, x, y int, s string, c color.Color) {
	if s == "" {
		return
	}
	tmp := image.NewRGBA(image.Rect(0, 0, textWidth(s), lineBytes+2))
	drawText(tmp, 0, lineBytes-2, s, c)
	b := tmp.Bounds()
	for ty := 0; ty < b.Dy(); ty++ {
		for tx := 0; tx < b.Dx(); tx++ {
			if px := tmp.RGBAAt(tx, ty); px.A != 0 {
				dst.Set(x+ty, y-tx, px)
			}
		}
	}
}

func fillRect(dst *image.RGBA, r image.Rectangle, c color.Color) {
	draw.Draw(dst, r.Intersect(dst.Bounds()), image.NewUniform(c), image.Point{}, draw.Src)
}

func outline(dst *image.RGBA, r image.Rectangle, c color.RGBA) {
	drawLine(dst, r.Min.X, r.Min.Y, r.Max.X-1, r.Min.Y, c, 1)
	drawLine(dst, r.Min.X, r.Max.Y-1, r.Max.X-1, r.Max.Y-1, c, 1)
	drawLine(dst, r.Min.X, r.Min.Y, r.Min.X, r.Max.Y-1, c, 1)
	drawLine(dst, r.Max.X-1, r.Min.Y, r.Max.X-1, r.Max.Y-1, c, 1)
}

// drawLine draws a line width pixels thick (Bresenham, a width x width
// square per step).
func drawLine(dst *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, width int) {
	drawLineDashed(dst, x0, y0, x1, y1, c, width, false)
}

// dashPixels is the length of a dash and of the gap after it.
const dashPixels = 5

// drawLineDashed is drawLine, dashed if dashed.
func drawLineDashed(dst *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, width int, dashed bool) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for step := 0; ; step++ {
		for i := 0; i < width && (!dashed || step/dashPixels%2 == 0); i++ {
			for j := 0; j < width; j++ {
				if p := image.Pt(x0+i-width/2, y0+j-width/2); p.In(dst.Bounds()) {
					dst.SetRGBA(p.X, p.Y, c)
				}
			}
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}
