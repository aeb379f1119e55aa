package pgcluster

import "syscall"

// serverProcAttr puts the postmaster in its own process group, so a Ctrl-C
// meant for the program does not also shut the database down under it, and
// asks the kernel to send it SIGINT (a fast shutdown) if our process dies
// without calling Stop, so a crashed or killed test binary leaves no server
// behind.
func serverProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGINT}
}
