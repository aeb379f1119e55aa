package uuidv7

import (
	"regexp"
	"testing"
)

func TestNewIsVersion7AndMonotonic(t *testing.T) {
	t.Parallel()
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	prev := ""
	seen := map[string]bool{}
	for i := 0; i < 10000; i++ {
		s := String()
		if !re.MatchString(s) {
			t.Fatalf("%q is not a canonical UUIDv7", s)
		}
		if s <= prev {
			t.Fatalf("ids not increasing: %s after %s", s, prev)
		}
		if seen[s] {
			t.Fatalf("duplicate id %s", s)
		}
		seen[s] = true
		prev = s
	}
}
