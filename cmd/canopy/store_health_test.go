package main

import "testing"

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
