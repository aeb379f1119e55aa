package deliverytag_test

import (
	"testing"

	"github.com/notifyd/notifyd/channels/deliverytag"
)

func TestTagRoundTripAndForgery(t *testing.T) {
	t.Parallel()
	s, err := deliverytag.New("secret")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := deliverytag.New("other secret")
	const id = "01900000-0000-7000-8000-00000000e011"
	tag := s.Tag(id)
	if got, ok := s.Delivery(tag); !ok || got != id {
		t.Fatalf("Delivery(%q) = %q, %v", tag, got, ok)
	}
	for _, bad := range []string{id, "", "_", other.Tag(id), "01900000-0000-7000-8000-00000000e012" + tag[len(id):], tag + "x"} {
		if got, ok := s.Delivery(bad); ok {
			t.Errorf("Delivery(%q) = %q, true; want refused", bad, got)
		}
	}
	if _, err := deliverytag.New(""); err == nil {
		t.Error("New(\"\") made a signer")
	}
}
