//go:build linux || darwin || freebsd || netbsd || openbsd

package email

import "syscall"

// peekPending reports whether the socket has data or an end of stream
// waiting to be read, or has failed, without consuming anything or waiting
// (MSG_PEEK, MSG_DONTWAIT): one system call.
func peekPending(rc syscall.RawConn) bool {
	pending := false
	err := rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR:
			// Nothing to read: the connection is open and quiet.
		default:
			pending = err != nil || n >= 0 // an error, data (n > 0) or EOF (n == 0)
		}
		return true // never wait for readability
	})
	return pending || err != nil
}
