package vlog

// Span is a byte range [Offset, Offset+Bytes) of a blob file.
type Span struct {
	Offset, Bytes int64
}

// End returns the offset after the span.
func (s Span) End() int64 { return s.Offset + s.Bytes }

// HoleSpans returns the block-aligned spans of a file of size bytes that
// hold no byte of any live record: the gaps between consecutive live
// records, shrunk inwards to block boundaries, and the tail after the last
// live record. live must be sorted by offset and not overlap.
//
// This follows the proposal: walk the records, remember where the last live
// record ended, and punch between it and the next live one. A dead record
// sharing a block with a live one keeps its bytes in that block (the block
// cannot be freed); the next punch after that neighbour dies frees it, which
// is the "repeated digging" the proposal mentions.
func HoleSpans(live []Span, size int64) []Span {
	var out []Span
	prevEnd := int64(0)
	add := func(from, to int64) {
		from = roundUp(from)
		if to != size {
			to -= to % BlockBytes
		}
		if to > from {
			out = append(out, Span{Offset: from, Bytes: to - from})
		}
	}
	for _, s := range live {
		if s.Offset < prevEnd {
			panic("vlog: live spans overlap or are unsorted")
		}
		add(prevEnd, s.Offset)
		prevEnd = s.End()
	}
	add(prevEnd, size)
	return out
}

func roundUp(off int64) int64 {
	if r := off % BlockBytes; r != 0 {
		return off + BlockBytes - r
	}
	return off
}
