package main

import (
	"strings"
	"testing"
)

func TestParseRangeMaxSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{in: "64MiB", want: 64 << 20},
		{in: "off", want: -1},
		{in: "1GB", want: 1_000_000_000},
		{in: "1KiB", err: "--range-max-size \"1KiB\""},
		{in: "-5MiB", err: "want off or a size"},
		{in: "lots", err: "want off or a size"},
	} {
		got, err := parseRangeMaxSize(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want one saying %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}
