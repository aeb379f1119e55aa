package httpapi_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/notifyd/notifyd/internal/wire"
	"github.com/notifyd/notifyd/stores"
)

// iosToken and androidToken make distinct valid tokens of each platform.
func iosToken(i int) string { return fmt.Sprintf("%064x", i+1) }

func androidToken(i int) string { return fmt.Sprintf("fcm%03d:APA91b%s", i, strings.Repeat("x", 140)) }

func TestDevicesAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u1, u2 := recipientToken(t, "u1"), recipientToken(t, "u2")

	phone := map[string]any{"platform": "ios", "token": iosToken(0), "app": "com.acme.app"}
	r := b.do(t, "POST", "/v1/devices", u1, phone)
	expect(t, r, 201, "")
	id, _ := r.body["id"].(string)
	// The same token again is the same device: 200, the same id; its app
	// may change.
	phone["app"] = "com.acme.app2"
	again := b.do(t, "POST", "/v1/devices", u1, phone)
	expect(t, again, 200, "")
	if again.body["id"] != id {
		t.Fatalf("re-registration: %s, want id %s", again.raw, id)
	}
	expect(t, b.do(t, "POST", "/v1/devices", u1, map[string]any{"platform": "android", "token": androidToken(0), "app": "com.acme.app"}), 201, "")
	// u2 registers the same iPhone token (a shared device): a device of
	// its own.
	theirs := b.do(t, "POST", "/v1/devices", u2, map[string]any{"platform": "ios", "token": iosToken(0), "app": "com.acme.app"})
	expect(t, theirs, 201, "")
	if theirs.body["id"] == id {
		t.Fatal("u2's registration took u1's device")
	}

	list := b.do(t, "GET", "/v1/devices", u1, nil)
	expect(t, list, 200, "")
	devices, _ := list.body["devices"].([]any)
	if len(devices) != 2 {
		t.Fatalf("u1's devices: %s", list.raw)
	}
	first := devices[0].(map[string]any)
	if first["id"] != id || first["platform"] != "ios" || first["token"] != iosToken(0) || first["app"] != "com.acme.app2" ||
		first["last_success_at"] != nil || first["failures"] != float64(0) || first["created_at"] == nil {
		t.Errorf("first device: %v", first)
	}
	admin := b.do(t, "GET", "/v1/recipients/u1/devices", adminToken, nil)
	expect(t, admin, 200, "")
	if string(admin.raw) != string(list.raw) {
		t.Errorf("the admin twin differs:\n%s\n%s", admin.raw, list.raw)
	}

	// Another recipient's id is not found, and stays.
	expect(t, b.do(t, "DELETE", "/v1/devices/"+theirs.body["id"].(string), u1, nil), 404, wire.CodeNotFound)
	expect(t, b.do(t, "DELETE", "/v1/devices/"+id, u2, nil), 404, wire.CodeNotFound)
	expect(t, b.do(t, "DELETE", "/v1/devices/"+id, u1, nil), 204, "")
	expect(t, b.do(t, "DELETE", "/v1/devices/"+id, u1, nil), 404, wire.CodeNotFound)
	if n := countDevices(t, b, "u2"); n != 1 {
		t.Errorf("u2 has %d devices, want 1", n)
	}
	if n := countDevices(t, b, "u1"); n != 1 {
		t.Errorf("u1 has %d devices, want 1", n)
	}
}

func countDevices(t *testing.T, b *bundle, recipient string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(t.Context(), `SELECT count(*) FROM notify_devices WHERE recipient = $1`, recipient).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Each field is checked by its platform's channel; a refusal names the
// field and writes nothing.
func TestDeviceValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u1 := recipientToken(t, "u1")
	tests := []struct {
		body   string
		status int
		field  string
	}{
		{`{"platform":"windows","token":"` + iosToken(0) + `","app":"com.acme.app"}`, 422, "platform"},
		{`{"platform":"IOS","token":"` + iosToken(0) + `","app":"com.acme.app"}`, 422, "platform"},
		{`{"token":"` + iosToken(0) + `","app":"com.acme.app"}`, 422, "platform"},
		{`{"platform":"ios","app":"com.acme.app"}`, 422, "token"},
		{`{"platform":"ios","token":"` + iosToken(0) + `"}`, 422, "app"},
		{`{"platform":"ios","token":"not-hex","app":"com.acme.app"}`, 422, "token"},
		{`{"platform":"ios","token":"` + iosToken(0)[:62] + `","app":"com.acme.app"}`, 422, "token"},
		{`{"platform":"ios","token":"` + androidToken(0) + `","app":"com.acme.app"}`, 422, "token"},
		{`{"platform":"android","token":"` + iosToken(0) + `/x","app":"com.acme.app"}`, 422, "token"},
		{`{"platform":"android","token":"short","app":"com.acme.app"}`, 422, "token"},
		{`{"platform":"android","token":"` + strings.Repeat("a", 1025) + `","app":"com.acme.app"}`, 422, "token"},
		{`{"platform":"ios","token":"` + iosToken(0) + `","app":"not a bundle"}`, 422, "app"},
		{`{"platform":"android","token":"` + androidToken(0) + `","app":"com.acme-app"}`, 422, "app"},
		{`{"platform":"android","token":"` + androidToken(0) + `","app":"` + strings.Repeat("a.", 200) + `b"}`, 422, "app"},
		{`{"platform":"ios","token":"` + iosToken(0) + `","app":"com.acme.app","extra":1}`, 400, ""},
		{`{"platform":["ios"],"token":"` + iosToken(0) + `","app":"com.acme.app"}`, 400, ""},
		{`{"platform":"ios","token":"` + iosToken(0) + "\u0000" + `","app":"com.acme.app"}`, 400, ""},
	}
	for _, tt := range tests {
		r := b.do(t, "POST", "/v1/devices", u1, tt.body)
		code := wire.CodeInvalidRequest
		if tt.status == 400 {
			code = wire.CodeBadRequest
		}
		expect(t, r, tt.status, code)
		if tt.field != "" {
			details, _ := r.body["error"].(map[string]any)["details"].([]any)
			if len(details) == 0 || details[0].(map[string]any)["field"] != tt.field {
				t.Errorf("%s: %s, want the field %s named", tt.body, r.raw, tt.field)
			}
		}
	}
	if n := countDevices(t, b, "u1"); n != 0 {
		t.Fatalf("refused registrations wrote %d devices", n)
	}
}

// A recipient has at most 20 devices, also when registrations race for the
// last places; the 21st is a 422 and writes nothing.
func TestDeviceLimitAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u1 := recipientToken(t, "u1")
	for i := range stores.MaxDevices - 3 {
		expect(t, b.do(t, "POST", "/v1/devices", u1, map[string]any{"platform": "ios", "token": iosToken(i), "app": "com.acme.app"}), 201, "")
	}
	const racers = 10
	var wg sync.WaitGroup
	statuses := make([]int, racers)
	for i := range racers {
		wg.Go(func() {
			statuses[i] = b.do(t, "POST", "/v1/devices", u1, map[string]any{"platform": "android", "token": androidToken(i), "app": "com.acme.app"}).status
		})
	}
	wg.Wait()
	var created, refused int
	for _, s := range statuses {
		switch s {
		case 201:
			created++
		case 422:
			refused++
		}
	}
	if created != 3 || refused != racers-3 {
		t.Fatalf("racing for the last 3 places: %d created, %d refused (%v)", created, refused, statuses)
	}
	r := b.do(t, "POST", "/v1/devices", u1, map[string]any{"platform": "ios", "token": iosToken(999), "app": "com.acme.app"})
	expect(t, r, 422, wire.CodeInvalidRequest)
	if !strings.Contains(string(r.raw), "at most 20 devices") {
		t.Errorf("the 21st: %s", r.raw)
	}
	if n := countDevices(t, b, "u1"); n != stores.MaxDevices {
		t.Fatalf("%d devices stored, want %d", n, stores.MaxDevices)
	}
	// A device registered already can still be registered again.
	expect(t, b.do(t, "POST", "/v1/devices", u1, map[string]any{"platform": "ios", "token": iosToken(0), "app": "com.acme.app"}), 200, "")
}

// Erasing a recipient deletes their devices, and says how many.
func TestErasureRemovesDevices(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u1 := recipientToken(t, "u1")
	expect(t, b.do(t, "POST", "/v1/devices", u1, map[string]any{"platform": "ios", "token": iosToken(1), "app": "com.acme.app"}), 201, "")
	expect(t, b.do(t, "POST", "/v1/devices", u1, map[string]any{"platform": "android", "token": androidToken(1), "app": "com.acme.app"}), 201, "")
	expect(t, b.do(t, "POST", "/v1/devices", recipientToken(t, "u2"), map[string]any{"platform": "ios", "token": iosToken(1), "app": "com.acme.app"}), 201, "")
	// u1 has nothing but devices: the erasure still finds something.
	r := b.do(t, "DELETE", "/v1/recipients/u1", adminToken, nil)
	expect(t, r, 200, "")
	if r.body["devices"] != float64(2) {
		t.Errorf("erasure: %s, want devices 2", r.raw)
	}
	if n := countDevices(t, b, "u1"); n != 0 {
		t.Errorf("%d devices left after the erasure", n)
	}
	if n := countDevices(t, b, "u2"); n != 1 {
		t.Errorf("the erasure took another recipient's device (%d left)", n)
	}
	list := b.do(t, "GET", "/v1/devices", u1, nil)
	expect(t, list, 200, "")
	if devices, _ := list.body["devices"].([]any); len(devices) != 0 {
		t.Errorf("after the erasure: %s", list.raw)
	}
}
