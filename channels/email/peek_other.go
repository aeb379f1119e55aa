//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package email

import "syscall"

// peekPending cannot look at the socket on this platform: the connection is
// taken to be open, and a server that closed it fails the send as temporary.
func peekPending(syscall.RawConn) bool { return false }
