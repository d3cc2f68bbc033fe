// Package vlog is Canopy's value log: the blob files that hold large values
// separated from the LSM, and the pure parts of their garbage collection.
//
// A blob file is an append-only sequence of records. Each record is
//
//	header (HeaderBytes) | key | value
//
// and the header holds a magic number, the key and value lengths, a CRC-32C
// of key||value and a CRC-32C of the header itself (see record.go).
//
// Invariant (alignment): a record of at most BlockBytes never straddles a
// BlockBytes boundary: one that would starts at the next boundary, and the
// gap is zero padding. A larger record straddles by nature; its header and
// key never do (Placement: PackLarge starts it in place when they fit,
// AlignLarge, the proposal's layout, always at the next boundary). Hence a
// header always lies inside one block, and punching whole blocks either
// leaves it intact or turns it into zeros, never into something that
// parses. This is the proposal's "4K alignment"; its cost is the padding,
// up to BlockBytes-1 bytes per record: for records just above 2 KiB (one
// per block) it approaches 50%, see docs/BENCHMARKS.md.
//
// Contract for callers (package storage is the only one):
//
//  1. A Pointer may be stored (in the LSM) only after Writer.Sync has
//     returned for the record it names: the record is durable before the
//     pointer.
//  2. A span may be punched (PunchHole) only if no record in it is live and
//     no reader can still hold a pointer into it. vlog cannot know either;
//     the caller checks liveness against the LSM and waits for older readers.
//  3. Every read verifies the record: ReadValue checks magic, lengths, both
//     checksums and that the stored key is the expected one. A failed check
//     is ErrCorruption; a read never returns unverified bytes.
//  4. A sealed file ends with an index of its record offsets (index.go),
//     so GC can iterate it without the LSM even after punching, when a
//     block may begin with the tail of a dead record whose header is gone.
//     Iterators read headers and keys only; a record whose header was
//     punched is skipped; Iterator.Value verifies the whole record. Active
//     files (no index yet) are never punched and are walked by lengths.
//
// The pickers (picker.go) are pure functions of per-file statistics; the
// storage engine owns I/O, the LSM and the locks.
package vlog
