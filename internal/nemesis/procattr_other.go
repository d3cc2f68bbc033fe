//go:build !linux

package nemesis

import "syscall"

// childProcAttr: no parent-death signal outside Linux; Run stops the nodes.
func childProcAttr() *syscall.SysProcAttr { return nil }
