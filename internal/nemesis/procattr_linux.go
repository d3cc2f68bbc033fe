//go:build linux

package nemesis

import "syscall"

// childProcAttr makes the kernel SIGKILL a node process if the nemesis dies
// first, so that no node outlives it.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
