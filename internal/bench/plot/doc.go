// Package plot draws the small PNG charts that `canopy bench` writes next
// to its CSV files: line charts (a metric against a swept parameter, one
// line per workload) and grouped-bar charts (one group per case, one bar
// per series). It uses only image/png and the fixed 7x13 bitmap font of
// golang.org/x/image/font/basicfont, so plots look the same on every
// machine and need no cgo, no system fonts and no external tools.
//
// Contract for callers:
//
//  1. Build one chart value per panel (LineChart or BarChart). Every series
//     of a line chart has len(X) == len(Y); every series of a bar chart has
//     one value per group. A violated shape panics: it is a caller's bug.
//  2. Lay panels out with Grid, which returns an *image.RGBA, and write it
//     with WritePNG.
//
// Values are drawn as given: axes start at zero on a linear scale (a bar
// or a throughput that does not start at zero exaggerates differences),
// and LineChart.LogX spaces the x values by their logarithm (for sweeps
// such as concurrency 1, 4, 16, 64). NaN and infinite values are skipped,
// not clamped.
//
// Rejected: gonum.org/v1/plot. It would give nicer output, but it pulls in
// a large dependency tree (and a vector font stack) for a handful of
// benchmark plots.
package plot
