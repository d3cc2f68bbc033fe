package process

import "syscall"

// childProcAttr makes the kernel SIGKILL a node process if the test
// process dies first (a panic, a go test timeout), where t.Cleanup does not
// run: no canopy process outlives the test. (Pdeathsig fires when the
// spawning thread exits; Go does not end threads of a running program
// except after LockOSThread, which this package does not use.)
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
