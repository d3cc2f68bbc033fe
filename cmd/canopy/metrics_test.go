package main

import (
	"strings"
	"testing"
)

// TestHTTPAddrFlag checks --http-addr: its default next to --listen, off,
// an explicit address, and the refusals, each naming the flag.
func TestHTTPAddrFlag(t *testing.T) {
	for _, tc := range []struct {
		flag, listen string
		want         string // when no error
		err          string // a part of the error; "" for none
	}{
		{"", "127.0.0.1:26257", "127.0.0.1:27257", ""},
		{"", "127.0.0.1:26259", "127.0.0.1:27259", ""},
		{"", ":26257", ":27257", ""},
		{"", "127.0.0.1:0", "127.0.0.1:0", ""},
		{"", "[::1]:26257", "[::1]:27257", ""},
		{"", "127.0.0.1:65000", "", "--http-addr: the default"},
		{"off", "127.0.0.1:26257", "", ""},
		{"127.0.0.1:8080", "127.0.0.1:26257", "127.0.0.1:8080", ""},
		{"127.0.0.1:0", "127.0.0.1:26257", "127.0.0.1:0", ""},
		{"8080", "127.0.0.1:26257", "", "--http-addr"},
		{"127.0.0.1:70000", "127.0.0.1:26257", "", "--http-addr"},
		{"127.0.0.1:26257", "127.0.0.1:26257", "", "--http-addr"},
	} {
		got, err := resolveHTTPAddr(tc.flag, tc.listen)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("--http-addr %q --listen %q: refused: %v", tc.flag, tc.listen, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("--http-addr %q --listen %q: got %q, want %q", tc.flag, tc.listen, got, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("--http-addr %q --listen %q: got %q, %v; want an error containing %q", tc.flag, tc.listen, got, err, tc.err)
		}
	}
}
