package jobs_test

import (
	"testing"
	"time"

	"github.com/notifyd/notifyd/jobs"
)

// The retry schedule of a temporary failure, before jitter: 2 s after the
// first failed attempt, doubling, capped at 5 minutes.
func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		attempt int
		want    time.Duration
	}{
		{-1, 2 * time.Second}, // out of range: as the first
		{0, 2 * time.Second},
		{1, 2 * time.Second},
		{2, 4 * time.Second},
		{3, 8 * time.Second},
		{4, 16 * time.Second},
		{5, 32 * time.Second},
		{6, 64 * time.Second},
		{7, 128 * time.Second},
		{8, 256 * time.Second},
		{9, 5 * time.Minute}, // 512 s, capped
		{10, 5 * time.Minute},
		{20, 5 * time.Minute},
		{21, 5 * time.Minute}, // past the shift's range
		{64, 5 * time.Minute},
		{1 << 30, 5 * time.Minute},
	}
	for _, tt := range tests {
		if got := jobs.Backoff(tt.attempt); got != tt.want {
			t.Errorf("Backoff(%d) = %v, want %v", tt.attempt, got, tt.want)
		}
	}
	// Never shorter than the attempt before it.
	for a := 1; a < 100; a++ {
		if jobs.Backoff(a+1) < jobs.Backoff(a) {
			t.Fatalf("Backoff(%d) = %v < Backoff(%d) = %v", a+1, jobs.Backoff(a+1), a, jobs.Backoff(a))
		}
	}
}
