package httpapi_test

import (
	"strings"
	"testing"

	"github.com/notifyd/notifyd/channels/webpush"
	"github.com/notifyd/notifyd/internal/httpapi"
	"github.com/notifyd/notifyd/internal/wire"
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
		expect(t, r, 422, wire.CodeInvalidRequest)
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

// pushSetup is a server with web push configured (a real webpush.Sender as
// the PushService: its endpoint checks are the ones the daemon uses).
func pushSetup(t *testing.T) (*bundle, string) {
	t.Helper()
	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	sender, err := webpush.New(&webpush.Config{VAPIDPublicKey: pub, VAPIDPrivateKey: priv, Subject: "mailto:ops@acme.test"},
		nil, nil, webpush.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return setup(t, setupOpts{options: func(o *httpapi.Options) { o.Push = sender }}), pub
}

func TestPushSubscriptionsAPI(t *testing.T) {
	t.Parallel()
	b, pub := pushSetup(t)
	u1, u2 := recipientToken(t, "u1"), recipientToken(t, "u2")
	keys := map[string]any{
		"p256dh": "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
		"auth":   "BTBZMqHH6r4Tts7J_aSIgg",
	}
	sub := map[string]any{"endpoint": "https://fcm.googleapis.com/fcm/send/abc:def", "expirationTime": nil, "keys": keys}

	r := b.do(t, "GET", "/v1/push-subscriptions/vapid-key", u1, nil)
	expect(t, r, 200, "")
	if r.body["public_key"] != pub {
		t.Fatalf("vapid key: %s", r.raw)
	}

	r = b.do(t, "POST", "/v1/push-subscriptions", u1, sub)
	expect(t, r, 201, "")
	id, _ := r.body["id"].(string)
	if id == "" {
		t.Fatalf("create: %s", r.raw)
	}
	// The same endpoint again: the same subscription, keys replaced.
	r = b.do(t, "POST", "/v1/push-subscriptions", u1, sub)
	expect(t, r, 200, "")
	if r.body["id"] != id {
		t.Fatalf("re-register: %s, want id %s", r.raw, id)
	}

	r = b.do(t, "GET", "/v1/push-subscriptions", u1, nil)
	expect(t, r, 200, "")
	list, _ := r.body["subscriptions"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["id"] != id || list[0].(map[string]any)["endpoint"] != sub["endpoint"] {
		t.Fatalf("list: %s", r.raw)
	}
	if _, ok := list[0].(map[string]any)["keys"]; ok {
		t.Error("the list shows the keys")
	}
	// Another recipient sees none and cannot delete it.
	r = b.do(t, "GET", "/v1/push-subscriptions", u2, nil)
	if l, _ := r.body["subscriptions"].([]any); len(l) != 0 {
		t.Fatalf("u2 sees %s", r.raw)
	}
	expect(t, b.do(t, "DELETE", "/v1/push-subscriptions/"+id, u2, nil), 404, wire.CodeNotFound)
	expect(t, b.do(t, "DELETE", "/v1/push-subscriptions/"+id, u1, nil), 204, "")
	expect(t, b.do(t, "DELETE", "/v1/push-subscriptions/"+id, u1, nil), 404, wire.CodeNotFound)
	expect(t, b.do(t, "DELETE", "/v1/push-subscriptions/nope", u1, nil), 404, wire.CodeNotFound)

	// Bad input: a 4xx naming the field, and nothing written.
	with := func(k string, v any) map[string]any {
		out := map[string]any{"endpoint": sub["endpoint"], "keys": map[string]any{"p256dh": keys["p256dh"], "auth": keys["auth"]}}
		if kk, ok := strings.CutPrefix(k, "keys."); ok {
			out["keys"].(map[string]any)[kk] = v
		} else {
			out[k] = v
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		body  any
		code  int
		field string
	}{
		{"no endpoint", with("endpoint", ""), 422, "endpoint"},
		{"http endpoint", with("endpoint", "http://fcm.googleapis.com/x"), 422, "endpoint"},
		{"private endpoint", with("endpoint", "https://10.0.0.5/push"), 422, "endpoint"},
		{"loopback endpoint", with("endpoint", "https://127.0.0.1:8443/push"), 422, "endpoint"},
		{"short IPv4 endpoint", with("endpoint", "https://127.1/push"), 422, "endpoint"},
		{"decimal IPv4 endpoint", with("endpoint", "https://2130706433/push"), 422, "endpoint"},
		{"hex IPv4 endpoint", with("endpoint", "https://0x7f.0.0.1/push"), 422, "endpoint"},
		{"trailing-dot localhost endpoint", with("endpoint", "https://localhost./push"), 422, "endpoint"},
		{"SMTP port endpoint", with("endpoint", "https://fcm.googleapis.com:25/push"), 422, "endpoint"},
		{"Redis port endpoint", with("endpoint", "https://fcm.googleapis.com:6379/push"), 422, "endpoint"},
		{"no keys", map[string]any{"endpoint": sub["endpoint"]}, 422, "keys"},
		{"short p256dh", with("keys.p256dh", "BCVxsr7N_eNgVRqvHtD0zTZs"), 422, "keys.p256dh"},
		{"p256dh not base64url", with("keys.p256dh", "%%%"), 422, "keys.p256dh"},
		{"long auth", with("keys.auth", "BTBZMqHH6r4Tts7J_aSIggBTBZ"), 422, "keys.auth"},
		{"no auth", with("keys.auth", nil), 422, "keys.auth"},
		{"keys not an object", with("keys", "x"), 400, "keys"},
		{"unknown field", with("extra", 1), 400, "extra"},
	} {
		r := b.do(t, "POST", "/v1/push-subscriptions", u1, tc.body)
		if r.status != tc.code {
			t.Errorf("%s: status %d, want %d: %s", tc.name, r.status, tc.code, r.raw)
			continue
		}
		details, _ := r.body["error"].(map[string]any)["details"].([]any)
		if len(details) == 0 || details[0].(map[string]any)["field"] != tc.field {
			t.Errorf("%s: %s, want field %s", tc.name, r.raw, tc.field)
		}
	}
	r = b.do(t, "POST", "/v1/push-subscriptions", u1, "{not json")
	if r.status != 400 {
		t.Errorf("malformed JSON: %d", r.status)
	}
	r = b.do(t, "GET", "/v1/push-subscriptions", u1, nil)
	if l, _ := r.body["subscriptions"].([]any); len(l) != 0 {
		t.Fatalf("bad input wrote %s", r.raw)
	}
	expect(t, b.do(t, "GET", "/v1/push-subscriptions", "", nil), 401, wire.CodeUnauthorized)
}

func TestPushSubscriptionsNotConfigured(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u1 := recipientToken(t, "u1")
	expect(t, b.do(t, "GET", "/v1/push-subscriptions/vapid-key", u1, nil), 404, wire.CodeNotFound)
	expect(t, b.do(t, "POST", "/v1/push-subscriptions", u1, map[string]any{}), 404, wire.CodeNotFound)
}
