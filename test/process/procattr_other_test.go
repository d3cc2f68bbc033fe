//go:build !linux

package process

import "syscall"

// childProcAttr: no parent-death signal outside Linux; t.Cleanup kills the
// nodes.
func childProcAttr() *syscall.SysProcAttr { return nil }
