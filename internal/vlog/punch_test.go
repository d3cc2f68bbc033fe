package vlog

import (
	"math/rand/v2"
	"testing"
)

// holeSpansPlain is HoleSpans' plain twin: mark every byte live, then take
// every block-aligned run of blocks with no live byte (the tail block counts
// whole even if the file ends inside it).
func holeSpansPlain(live []Span, size int64) []Span {
	used := make([]bool, (size+BlockBytes-1)/BlockBytes)
	for _, s := range live {
		for b := s.Offset / BlockBytes; b <= (s.End()-1)/BlockBytes; b++ {
			used[b] = true
		}
	}
	var out []Span
	for b := int64(0); b < int64(len(used)); b++ {
		if used[b] {
			continue
		}
		start := b
		for b < int64(len(used)) && !used[b] {
			b++
		}
		end := min(b*BlockBytes, size)
		out = append(out, Span{start * BlockBytes, end - start*BlockBytes})
	}
	return out
}

func TestHoleSpansMatchesPlain(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 9))
	for iter := 0; iter < 2000; iter++ {
		var live []Span
		off := int64(0)
		for n := rng.IntN(12); n > 0; n-- {
			off += int64(rng.IntN(3 * BlockBytes))
			b := int64(1 + rng.IntN(2*BlockBytes))
			live = append(live, Span{off, b})
			off += b
		}
		size := off + int64(rng.IntN(2*BlockBytes))
		if size == 0 {
			continue
		}
		got, want := HoleSpans(live, size), holeSpansPlain(live, size)
		// The plain twin splits nothing the real one merges: compare as sets
		// of covered blocks.
		if cover(got) != cover(want) || len(got) != len(want) {
			t.Fatalf("seed %d: live %v size %d: got %v want %v", seed, live, size, got, want)
		}
	}
}

func cover(spans []Span) string {
	s := ""
	for _, sp := range spans {
		s += string(rune(sp.Offset)) + "-" + string(rune(sp.End())) + ","
	}
	return s
}

func TestPickers(t *testing.T) {
	files := []FileStats{
		{Num: 1, RecordBytes: 100, DiscardBytes: 90, AllocatedBytes: 100},
		{Num: 2, RecordBytes: 100, DiscardBytes: 40, AllocatedBytes: 60},
		{Num: 3, RecordBytes: 100, DiscardBytes: 60, PunchedDiscardBytes: 50, AllocatedBytes: 10},
		{Num: 4, RecordBytes: 100, DiscardBytes: 0, AllocatedBytes: 100},
	}
	if got := PickRewrite(files, 0.5, 1000); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Fatalf("rewrite %v", got)
	}
	if got := PickPunch(files, 20, 10); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("punch %v", got)
	}
	if got := PickMerge(files, 70, 1000); len(got) != 2 || got[0] != 3 || got[1] != 2 {
		t.Fatalf("merge %v", got)
	}
	if got := PickMerge(files[3:], 200, 1000); len(got) != 0 {
		t.Fatalf("merge of one healthy file %v", got)
	}
	if got := PickRewrite(files, 0.5, 5); len(got) != 1 {
		t.Fatalf("rewrite under input limit %v", got)
	}
}
