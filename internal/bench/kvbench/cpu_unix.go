//go:build unix

package kvbench

import (
	"syscall"
	"time"
)

// ProcessCPU returns the user plus system CPU time this process has used
// so far, or 0 if it cannot tell.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
