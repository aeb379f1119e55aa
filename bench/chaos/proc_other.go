//go:build !linux

package main

import "syscall"

// sysProcAttr puts a daemon in its own process group, so a Ctrl-C meant for
// the harness does not reach it (the harness stops it).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
