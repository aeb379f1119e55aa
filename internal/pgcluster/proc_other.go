//go:build !linux

package pgcluster

import "syscall"

// serverProcAttr puts the postmaster in its own process group, so a Ctrl-C
// meant for the program does not also shut the database down under it. Only
// Linux can also tie the server's life to ours; elsewhere a killed program
// leaves the server running until the next Start on the same Dir reports it.
func serverProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}
