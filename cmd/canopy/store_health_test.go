package main

import (
	"strings"
	"testing"
)

func TestParseStoreMinFree(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"off", -1, true}, {"1048576", 1 << 20, true}, {"64MiB", 64 << 20, true},
		{"1.5GiB", 3 << 29, true}, {"2GB", 2e9, true}, {"512 KiB", 512 << 10, true}, {"10B", 10, true},
		{"-1", 0, false}, {"1%", 0, false}, {"lots", 0, false}, {"2PiB", 0, false}, {"", 0, false},
	} {
		got, err := parseStoreMinFree(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("parseStoreMinFree(%q) = %d, %v; want %d (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestStoreFatalLine: the line a node prints when its storage engine
// cannot go on is one line, says "pebble:" once, and for a failed fsync
// (a fatal commit error) says to check the disk rather than that the store
// may be damaged.
func TestStoreFatalLine(t *testing.T) {
	for _, tc := range []struct{ msg, want string }{
		{"pebble: fatal commit error: storage: injected fault: fsync failed",
			"error: store data/n3: pebble: fatal commit error: storage: injected fault: fsync failed; writing to its disk failed, so the node stopped before acknowledging the write: check the disk, then start the node again (it refuses the store if it was damaged; docs/OPERATIONS.md, \"A damaged store\")"},
		{"pebble: fatal commit error: write 000012.log:\n no space left on device",
			"error: store data/n3: pebble: fatal commit error: write 000012.log: no space left on device; its disk is full: free space on it and start the node again (docs/OPERATIONS.md, \"A full disk\")"},
		{"pebble: version edit validation failed",
			"error: store data/n3: pebble: version edit validation failed; the store may be damaged: see docs/OPERATIONS.md, \"A damaged store\""},
	} {
		got := storeFatalLine("data/n3", tc.msg)
		if got != tc.want {
			t.Errorf("storeFatalLine(%q) =\n%s\nwant\n%s", tc.msg, got, tc.want)
		}
		if strings.Contains(got, "\n") || strings.Count(got, "pebble:") != 1 {
			t.Errorf("storeFatalLine(%q) = %q: want one line with one \"pebble:\"", tc.msg, got)
		}
	}
}
