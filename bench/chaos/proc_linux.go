package main

import "syscall"

// sysProcAttr puts a daemon in its own process group (a Ctrl-C meant for the
// harness does not reach it; the harness stops it) and has the kernel kill it
// if the harness dies first, so no daemon outlives a crashed run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
