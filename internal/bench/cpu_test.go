package bench

import (
	"runtime"
	"testing"
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
