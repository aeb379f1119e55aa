package jobs

import "time"

// wait is servertest.Wait for the tests inside package jobs, which cannot
// import servertest (it imports jobs: an import cycle). It polls cond every
// 20 ms until it returns true (true) or timeout passes (false).
func wait(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond) // the polling interval
	}
}
