package httpapi_test

import (
	"testing"

	"github.com/notifyd/notifyd/internal/httpapi"
)

// TestRecipientPhone: the profile's phone is E.164; anything else is a 422
// naming the field, and nothing is written.
func TestRecipientPhone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, "PUT", "/v1/recipients/ph", adminToken, map[string]any{"phone": "+14155550123"})
	expect(t, r, 200, "")
	if r.body["phone"] != "+14155550123" {
		t.Fatalf("put: %s", r.raw)
	}
	for _, bad := range []string{"4155550123", "+1 415 555 0123", "+0123456789", "+1234", "+1234567890123456", "tel:+14155550123"} {
		r := b.do(t, "PUT", "/v1/recipients/ph", adminToken, map[string]any{"phone": bad})
		expect(t, r, 422, httpapi.CodeInvalidRequest)
		details, _ := r.body["error"].(map[string]any)["details"].([]any)
		if len(details) == 0 || details[0].(map[string]any)["field"] != "phone" {
			t.Errorf("phone %q: %s", bad, r.raw)
		}
	}
	got := b.do(t, "GET", "/v1/recipients/ph", adminToken, nil)
	expect(t, got, 200, "")
	if got.body["phone"] != "+14155550123" {
		t.Fatalf("a refused PUT changed the profile: %s", got.raw)
	}
}
