package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Store health at the command line (issue 13, items 3 and 4): the
// --store-min-free flag, and the one line printed when Pebble meets an
// error it cannot continue after.

// byteUnits are the suffixes parseByteSize accepts, longest first.
var byteUnits = []struct {
	suffix string
	bytes  int64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

// parseStoreMinFree parses --store-min-free: "0" (the default: 1% of the
// disk, at least 32 MiB, at most 1 GiB), "off" (no check), or a size such
// as 512MiB, 2GB or 1048576.
func parseStoreMinFree(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "off" {
		return -1, nil
	}
	v, ok := parseBytes(s)
	if !ok {
		return 0, fmt.Errorf("--store-min-free %q: want 0 (default), off, or a size in [0, 1 PiB] such as 512MiB or 2GB", s)
	}
	return v, nil
}

// parseRangeMaxSize parses --range-max-size: the size past which a range
// is split (kvserver.Config.RangeSplitBytes; off: -1, never).
func parseRangeMaxSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "off" {
		return -1, nil
	}
	v, ok := parseBytes(s)
	if !ok || v < RangeMaxSizeMin {
		return 0, fmt.Errorf("--range-max-size %q: want off or a size in [%d bytes, 1 PiB] such as 64MiB", s, RangeMaxSizeMin)
	}
	return v, nil
}

// RangeMaxSizeMin bounds --range-max-size from below: smaller ranges
// would split on every few writes.
const RangeMaxSizeMin = 64 << 10

// parseBytes parses a byte size such as 512MiB, 2GB or 4096, in [0, 1 PiB].
func parseBytes(s string) (int64, bool) {
	num, mult := s, int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.bytes
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || v*float64(mult) > 1<<50 {
		return 0, false
	}
	return int64(v * float64(mult)), true
}

// storeFatal returns the storage engine's Fatal hook for the store in dir:
// one error line with what to do, and exit status 1, instead of a panic
// (the engine cannot continue; see storage.Options.Fatal).
func storeFatal(dir string) func(msg string) {
	return func(msg string) {
		fmt.Fprintln(os.Stderr, storeFatalLine(dir, msg))
		os.Exit(1)
	}
}

// storeFatalLine is storeFatal's line for the engine's message msg: one
// line (msg's white space collapsed), with what to do.
//
// A fatal commit error (Pebble's WAL write or fsync failed: the commit
// pipeline cannot continue) does not by itself damage the store: the
// write whose sync failed was never acknowledged (the Raft log is synced
// before anything is acknowledged, I2). So the line says to check the
// disk and start the node again; the checks at start refuse the store if
// it was damaged after all. It used to say "the store may be damaged".
func storeFatalLine(dir, msg string) string {
	msg = strings.Join(strings.Fields(msg), " ")
	advice := "the store may be damaged: see docs/OPERATIONS.md, \"A damaged store\""
	switch {
	case strings.Contains(msg, "no space left on device"):
		advice = "its disk is full: free space on it and start the node again (docs/OPERATIONS.md, \"A full disk\")"
	case strings.Contains(msg, "fatal commit error"):
		advice = "writing to its disk failed, so the node stopped before acknowledging the write: check the disk, then start the node again (it refuses the store if it was damaged; docs/OPERATIONS.md, \"A damaged store\")"
	}
	return fmt.Sprintf("error: store %s: %s; %s", dir, msg, advice)
}
