package txnstatus

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"
)

func cellsOf(column string, n int) []Cell {
	out := make([]Cell, n)
	for i := range out {
		out[i] = Cell{Row: binary.BigEndian.AppendUint64(nil, uint64(i)), Column: []byte(column)}
	}
	return out
}

// batchShape describes a batch as its columns with cell counts, in order,
// e.g. "A:80 C:20".
func batchShape(b []Cell) string {
	s := ""
	for i := 0; i < len(b); {
		j := i
		for j < len(b) && string(b[j].Column) == string(b[i].Column) {
			j++
		}
		if s != "" {
			s += " "
		}
		s += fmt.Sprintf("%s:%d", b[i].Column, j-i)
		i = j
	}
	return s
}

// The record's worked example: CC = 100, SQ = 300, columns A..E with
// 80, 200, 70, 688, 30 cells. B takes one request, D three; A, C and E are
// batched across columns as [80 of A, 20 of C] and [50 of C, 30 of E].
func TestPartitionForLoadRecordExample(t *testing.T) {
	var cells []Cell
	for _, g := range []struct {
		col string
		n   int
	}{{"A", 80}, {"B", 200}, {"C", 70}, {"D", 688}, {"E", 30}} {
		cells = append(cells, cellsOf(g.col, g.n)...)
	}
	// Input order across columns does not matter; within a column it is kept.
	rng := rand.New(rand.NewPCG(1, 2))
	shuffled := slices.Clone(cells)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	slices.SortStableFunc(shuffled, func(a, b Cell) int { return compareCells(a, b) })
	for _, in := range [][]Cell{cells, shuffled} {
		got := PartitionForLoad(in, 100, 300)
		var shapes []string
		for _, b := range got {
			shapes = append(shapes, batchShape(b))
		}
		want := []string{"B:200", "D:300", "D:300", "D:88", "A:80 C:20", "C:50 E:30"}
		if !slices.Equal(shapes, want) {
			t.Fatalf("batches %q, want %q", shapes, want)
		}
	}
}

func TestPartitionForLoadEdges(t *testing.T) {
	if got := PartitionForLoad(nil, 1, 1); got != nil {
		t.Errorf("no cells: %v", got)
	}
	// CC = SQ = 1: one request per cell.
	if got := PartitionForLoad(cellsOf("x", 3), 1, 1); len(got) != 3 {
		t.Errorf("CC=SQ=1: %d batches", len(got))
	}
	// A column of exactly CC cells is a column of its own.
	got := PartitionForLoad(append(cellsOf("a", 5), cellsOf("b", 1)...), 5, 5)
	if len(got) != 2 || batchShape(got[0]) != "a:5" || batchShape(got[1]) != "b:1" {
		t.Errorf("exactly CC: %v", got)
	}
	// Batches do not alias: appending to one leaves the next intact.
	cells := append(append(cellsOf("c", 1), cellsOf("d", 1)...), cellsOf("e", 1)...)
	got = PartitionForLoad(cells, 2, 2)
	_ = append(got[0], Cell{Column: []byte("zz")})
	if len(got) != 2 || batchShape(got[0]) != "c:1 d:1" || batchShape(got[1]) != "e:1" {
		t.Errorf("aliasing: %v", got)
	}
	for _, lim := range [][2]int{{0, 1}, {2, 1}, {-1, -1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("limits %v did not panic", lim)
				}
			}()
			PartitionForLoad(cellsOf("x", 1), lim[0], lim[1])
		}()
	}
}

// The record's guarantees, on random inputs.
func TestPartitionForLoadQuick(t *testing.T) {
	f := func(seed uint64, ccRaw, sqExtra uint8) bool {
		rng := rand.New(rand.NewPCG(seed, 0))
		cc := int(ccRaw%50) + 1
		sq := cc + int(sqExtra%100)
		var cells []Cell
		for range rng.IntN(600) {
			col := []byte{byte(rng.IntN(12))}
			cells = append(cells, Cell{Row: []byte{byte(rng.IntN(256))}, Column: col})
		}
		counts := map[string]int{}
		for _, c := range cells {
			counts[string(c.Column)]++
		}
		batches := PartitionForLoad(cells, cc, sq)

		// A partition of the input (as a multiset, in canonical order).
		var flat []Cell
		for _, b := range batches {
			flat = append(flat, b...)
		}
		a, b := slices.Clone(cells), flat
		slices.SortFunc(a, compareCells)
		slices.SortFunc(b, compareCells)
		if !slices.EqualFunc(a, b, func(x, y Cell) bool { return compareCells(x, y) == 0 }) {
			t.Logf("seed %d: output is not a partition of the input", seed)
			return false
		}
		batchesOf := map[string]int{}
		for i, bt := range batches {
			if len(bt) == 0 || len(bt) > sq {
				t.Logf("seed %d: batch %d has %d cells, SQ %d", seed, i, len(bt), sq)
				return false
			}
			cols := map[string]bool{}
			for _, c := range bt {
				cols[string(c.Column)] = true
			}
			for col := range cols {
				batchesOf[col]++
				heavy := counts[col] >= cc
				if heavy && len(cols) != 1 {
					t.Logf("seed %d: column %x with %d >= CC cells shares batch %d", seed, col, counts[col], i)
					return false
				}
				if !heavy && len(bt) > cc {
					t.Logf("seed %d: cross-column batch %d has %d > CC cells", seed, i, len(bt))
					return false
				}
			}
			// A column strictly inside a cross-column batch lies wholly in it.
			if len(cols) > 2 {
				first, last := string(bt[0].Column), string(bt[len(bt)-1].Column)
				for col := range cols {
					if col != first && col != last {
						n := 0
						for _, c := range bt {
							if string(c.Column) == col {
								n++
							}
						}
						if n != counts[col] {
							t.Logf("seed %d: inner column %x split", seed, col)
							return false
						}
					}
				}
			}
		}
		for col, n := range batchesOf {
			if counts[col] < cc && n > 2 {
				t.Logf("seed %d: light column %x in %d batches", seed, col, n)
				return false
			}
			if counts[col] >= cc && n != (counts[col]+sq-1)/sq {
				t.Logf("seed %d: heavy column %x in %d batches", seed, col, n)
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 2000}); err != nil {
		t.Fatal(err)
	}
}

// compareCells orders cells by column, then row.
func compareCells(a, b Cell) int {
	if c := bytes.Compare(a.Column, b.Column); c != 0 {
		return c
	}
	return bytes.Compare(a.Row, b.Row)
}
