package statusbench

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Table is an experiment's result: a header and rows of formatted cells.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
}

// Print writes the table with aligned columns.
func (t Table) Print(w io.Writer) {
	width := make([]int, len(t.Header))
	for i, h := range t.Header {
		width[i] = len(h)
	}
	for _, r := range t.Rows {
		for i, c := range r {
			if i < len(width) && len(c) > width[i] {
				width[i] = len(c)
			}
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, c := range cells {
			if i > 0 {
				b.WriteString("  ")
			}
			fmt.Fprintf(&b, "%*s", width[i], c)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	if t.Title != "" {
		fmt.Fprintln(w, t.Title)
	}
	line(t.Header)
	for _, r := range t.Rows {
		line(r)
	}
}

// WriteCSV writes the table to path, with machine as a last column.
func (t Table) WriteCSV(path, machine string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(append(append([]string(nil), t.Header...), "machine"))
	for _, r := range t.Rows {
		_ = w.Write(append(append([]string(nil), r...), machine))
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d.Nanoseconds())/1e6) }

// Msf is a duration in milliseconds as a float.
func Msf(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
