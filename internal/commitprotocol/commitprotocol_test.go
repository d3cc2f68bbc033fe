package commitprotocol

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Name
		err  error
	}{
		{"", Default, nil},
		{"default", Default, nil},
		{"2pc-locking", TwoPCLocking, nil},
		{"hierarchy-locking", HierarchyLocking, nil},
		{"hierarchy-timestamps", HierarchyTimestamps, nil},
		{"2pc", "", ErrUnknown},
	} {
		got, err := Parse(tc.in)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("Parse(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
	for _, n := range All {
		_, err := Check(string(n))
		if n.Built() != (err == nil) {
			t.Errorf("Check(%q) = %v, but Built() = %v", n, err, n.Built())
		}
		if !n.Built() && !errors.Is(err, ErrNotBuilt) {
			t.Errorf("Check(%q) = %v, want ErrNotBuilt", n, err)
		}
	}
	if Of("") != Default || Of("2pc-locking") != TwoPCLocking {
		t.Error("Of")
	}
}
