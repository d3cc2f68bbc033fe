package txnstatus

import (
	"fmt"
	"slices"
)

// ValidateLoadLimits checks the selective-batching limits: the cross
// column batch limit (CC) must be at least 1 and the single query limit
// (SQ) at least CC, as the record expects. Call it when configuration is
// loaded; PartitionForLoad panics on limits it rejects.
func ValidateLoadLimits(crossColumnBatchLimit, singleQueryLimit int) error {
	if crossColumnBatchLimit < 1 || singleQueryLimit < crossColumnBatchLimit {
		return fmt.Errorf("%w: load limits need 1 <= cross column batch limit (%d) <= single query limit (%d)",
			ErrInvalidArgument, crossColumnBatchLimit, singleQueryLimit)
	}
	return nil
}

// PartitionForLoad groups cells into read requests with the record's
// selective batching ("Cell Loader V2"): a compromise between one request
// per column (too many small requests when, as in tickets, cells spread
// over many columns) and one huge request (which a single server thread
// serves slowly).
//
// Rules, exactly as in the record, with CC = crossColumnBatchLimit and
// SQ = singleQueryLimit:
//
//  1. Cells are grouped by column; columns are visited in bytewise order,
//     and within a column cells keep their input order.
//  2. A column with at least CC cells takes up batches of its own, cut in
//     input order into batches of SQ cells (the last one may be smaller).
//  3. The cells of every other column are appended, column by column, to
//     one list, which is cut into contiguous batches of CC cells (the last
//     one may be smaller). A column may thus be split over two adjacent
//     batches, but a column that is neither the first nor the last in a
//     batch lies wholly in it, and no column is in more than two batches.
//
// The result lists the own-column batches (rule 2, in column order) and
// then the cross-column batches (rule 3, in list order); requests are
// meant to be sent in parallel, so the order only makes the output
// deterministic. Every input cell is in exactly one batch (duplicates are
// kept: removing them is the caller's business), every batch has between 1
// and SQ cells, and the batches do not share backing arrays with each other
// (they do share the Row and Column slices of the input cells).
//
// The record notes that this is not optimal (a column split over two
// batches is requested twice) and that solving the bin packing, e.g. with
// first-fit decreasing, could avoid that; like the record, we do not.
//
// PartitionForLoad panics if ValidateLoadLimits rejects the limits.
func PartitionForLoad(cells []Cell, crossColumnBatchLimit, singleQueryLimit int) [][]Cell {
	if err := ValidateLoadLimits(crossColumnBatchLimit, singleQueryLimit); err != nil {
		panic(err)
	}
	if len(cells) == 0 {
		return nil
	}
	byColumn := map[string][]Cell{}
	var columns []string
	for _, c := range cells {
		col := string(c.Column)
		if _, ok := byColumn[col]; !ok {
			columns = append(columns, col)
		}
		byColumn[col] = append(byColumn[col], c)
	}
	slices.Sort(columns) // Go string order is bytewise order

	var out [][]Cell
	var cross []Cell
	for _, col := range columns {
		group := byColumn[col]
		if len(group) >= crossColumnBatchLimit {
			out = appendChunks(out, group, singleQueryLimit)
		} else {
			cross = append(cross, group...)
		}
	}
	return appendChunks(out, cross, crossColumnBatchLimit)
}

// appendChunks appends s to out cut into consecutive chunks of size n (the
// last one may be smaller), each with its own capacity so that appending to
// one never writes into the next.
func appendChunks(out [][]Cell, s []Cell, n int) [][]Cell {
	for len(s) > 0 {
		k := min(n, len(s))
		out = append(out, s[:k:k])
		s = s[k:]
	}
	return out
}
