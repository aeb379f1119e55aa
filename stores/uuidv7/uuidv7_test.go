package uuidv7

import (
	"regexp"
	"strings"
	"testing"
	"time"
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

func TestValid(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		String():                               true,
		"01A22B9C-0000-7000-8000-0000000000AF": true,
		"01a22b9c00007000800000000000000af":    false,
		"01a22b9c-0000-7000-8000-0000000000ag": false,
		"01a22b9c-0000-7000-8000-0000000000a":  false,
		"01a22b9c_0000-7000-8000-0000000000af": false,
		"":                                     false,
	} {
		if Valid(s) != want {
			t.Errorf("Valid(%q) = %t, want %t", s, !want, want)
		}
	}
}

func TestFloorOrdersBeforeLaterIDs(t *testing.T) {
	now := time.Now()
	id := String()
	if f := Floor(now.Add(-time.Millisecond)); !(f < id) {
		t.Fatalf("Floor a millisecond before %s is %s, not below it", id, f)
	}
	if f := Floor(now.Add(time.Second)); !(id < f) {
		t.Fatalf("Floor a second after %s is %s, not above it", id, f)
	}
	if got, want := Floor(time.UnixMilli(0x0190_b8a4_0000)), "0190b8a4-0000-0000-0000-000000000000"; got != want {
		t.Fatalf("Floor = %s, want %s", got, want)
	}
}

func TestStringsAreValidDistinctAndOrdered(t *testing.T) {
	ids := Strings(3000) // more than one millisecond's counter may hold
	var b Batch
	ids = append(ids, b.Next(), b.Next(), String())
	for i, id := range ids {
		if !Valid(id) || id[14] != '7' || !strings.ContainsAny(id[19:20], "89ab") {
			t.Fatalf("id %d %q is not a UUIDv7", i, id)
		}
		if i > 0 && !(ids[i-1] < id) {
			t.Fatalf("id %d %s does not sort after %s", i, id, ids[i-1])
		}
	}
	if Strings(0) != nil {
		t.Fatal("Strings(0) made ids")
	}
}

func TestParseIsFormatsInverse(t *testing.T) {
	for range 100 {
		u := New()
		got, ok := Parse(Format(u))
		if !ok || got != u {
			t.Fatalf("Parse(Format(%x)) = %x, %v", u, got, ok)
		}
	}
	if u, ok := Parse("0190ABCD-0000-7000-8000-0000000000E1"); !ok || Format(u) != "0190abcd-0000-7000-8000-0000000000e1" {
		t.Errorf("upper case: %x %v", u, ok)
	}
	for _, bad := range []string{"", "not-a-uuid", "0190abcd00007000800000000000000e1", "0190abcd-0000-7000-8000-0000000000g1"} {
		if _, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
