package vlog

import (
	"cmp"
	"slices"
)

// FileStats is what the pickers know of one sealed blob file. The engine
// fills it from its manifest and from stat.
type FileStats struct {
	Num uint64
	// SizeBytes is the file length (records plus padding).
	SizeBytes int64
	// RecordBytes is the sum of the sizes of all records ever appended.
	RecordBytes int64
	// DiscardBytes is the sum of the sizes of the records that are dead.
	// Invariant: DiscardBytes <= RecordBytes.
	DiscardBytes int64
	// PunchedDiscardBytes is DiscardBytes as of the last punch of the file:
	// the dead bytes a punch has already visited.
	PunchedDiscardBytes int64
	// AllocatedBytes is the space the file occupies on disk (st_blocks*512,
	// or SizeBytes minus punched bytes where stat cannot tell).
	AllocatedBytes int64
}

// LiveBytes returns the bytes of live records.
func (f FileStats) LiveBytes() int64 { return f.RecordBytes - f.DiscardBytes }

// DiscardRatio returns DiscardBytes/RecordBytes (0 for an empty file).
func (f FileStats) DiscardRatio() float64 {
	if f.RecordBytes == 0 {
		return 0
	}
	return float64(f.DiscardBytes) / float64(f.RecordBytes)
}

// PickRewrite is Titan's classic picker: files whose discardable ratio is at
// least ratioMin, highest ratio first, until the live bytes to copy reach
// inputBytesMax (at least one file is picked when any qualifies).
func PickRewrite(files []FileStats, ratioMin float64, inputBytesMax int64) []uint64 {
	var cands []FileStats
	for _, f := range files {
		if f.RecordBytes > 0 && f.DiscardRatio() >= ratioMin {
			cands = append(cands, f)
		}
	}
	slices.SortFunc(cands, func(a, b FileStats) int {
		return cmp.Or(cmp.Compare(b.DiscardRatio(), a.DiscardRatio()), cmp.Compare(a.Num, b.Num))
	})
	return takeUpTo(cands, inputBytesMax)
}

// PickPunch is stage one of the proposal: files whose discardable bytes not
// yet visited by a punch reach bytesMin, largest first, at most filesMax.
// Unlike PickRewrite it ignores the ratio: punching copies nothing, so its
// cost does not grow with the live bytes of a file.
func PickPunch(files []FileStats, bytesMin int64, filesMax int) []uint64 {
	var cands []FileStats
	for _, f := range files {
		if f.DiscardBytes-f.PunchedDiscardBytes >= bytesMin && f.DiscardBytes > f.PunchedDiscardBytes {
			cands = append(cands, f)
		}
	}
	slices.SortFunc(cands, func(a, b FileStats) int {
		return cmp.Or(cmp.Compare(b.DiscardBytes-b.PunchedDiscardBytes, a.DiscardBytes-a.PunchedDiscardBytes), cmp.Compare(a.Num, b.Num))
	})
	var out []uint64
	for _, f := range cands {
		if len(out) == filesMax {
			break
		}
		out = append(out, f.Num)
	}
	return out
}

// PickMerge is stage two of the proposal: files whose allocated size is
// below sizeBelowBytes, smallest first, until the live bytes to copy reach
// inputBytesMax. It picks nothing unless at least two files qualify or one
// file is mostly dead (merging one healthy small file into a new one of the
// same size would only copy it).
func PickMerge(files []FileStats, sizeBelowBytes, inputBytesMax int64) []uint64 {
	var cands []FileStats
	for _, f := range files {
		if f.AllocatedBytes < sizeBelowBytes {
			cands = append(cands, f)
		}
	}
	slices.SortFunc(cands, func(a, b FileStats) int {
		return cmp.Or(cmp.Compare(a.AllocatedBytes, b.AllocatedBytes), cmp.Compare(a.Num, b.Num))
	})
	out := takeUpTo(cands, inputBytesMax)
	if len(out) == 1 && cands[0].DiscardRatio() < 0.5 {
		return nil
	}
	return out
}

func takeUpTo(cands []FileStats, inputBytesMax int64) []uint64 {
	var out []uint64
	var sum int64
	for _, f := range cands {
		if len(out) > 0 && sum+f.LiveBytes() > inputBytesMax {
			break
		}
		out = append(out, f.Num)
		sum += f.LiveBytes()
	}
	return out
}
