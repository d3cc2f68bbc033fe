package bench

import (
	"os"
	"runtime"
	"testing"
	"time"
)

func TestSystemBusyCPUMonotonic(t *testing.T) {
	a, ok := SystemBusyCPU()
	if !ok {
		if runtime.GOOS == "linux" {
			t.Fatal("no /proc/stat reading on linux")
		}
		t.Skip("no /proc/stat")
	}
	for i := 0; i < 1e7; i++ { // burn a little CPU
		_ = i * i
	}
	b, _ := SystemBusyCPU()
	if b < a || a <= 0 {
		t.Fatalf("busy CPU went from %v to %v", a, b)
	}
}

func TestParseProcStatCPU(t *testing.T) {
	for _, c := range []struct {
		line string
		want time.Duration
		ok   bool
	}{
		// utime 250, stime 50 ticks: 3 s.
		{"1234 (etcd) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 0 0\n", 3 * time.Second, true},
		// A command name with spaces and a ')' of its own.
		{"77 (a) b (c)) R 1 77 77 0 -1 0 0 0 0 0 7 3 1 1 20 0 1 0 5 0 0", 100 * time.Millisecond, true},
		{"1234 (etcd) S 1 2 3", 0, false},
		{"no parenthesis here", 0, false},
		{"1 (x) S 1 1 1 0 -1 0 0 0 0 0 ab 3 0 0 20 0 1 0 5 0 0", 0, false},
	} {
		got, err := parseProcStatCPU(c.line)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseProcStatCPU(%q) = %v, %v; want %v, ok %v", c.line, got, err, c.want, c.ok)
		}
	}
}

func TestProcessesCPUSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no /proc")
	}
	self := os.Getpid()
	a, err := ProcessesCPU([]int{self})
	if err != nil {
		t.Fatal(err)
	}
	two, err := ProcessesCPU([]int{self, self})
	if err != nil || two < 2*a {
		t.Fatalf("the same process twice: %v (%v), once: %v", two, err, a)
	}
	if _, err := ProcessesCPU([]int{self, -1}); err == nil {
		t.Fatal("pid -1 accepted")
	}
}
