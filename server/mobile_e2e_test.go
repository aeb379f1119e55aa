package server_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/internal/testing/mobilepushtest"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
)

const (
	apnsTeam = "TEAM123456"
	apnsKey  = "KEY0000001"
	bundleID = "com.shop.app"
)

// mobileServices starts a local FCM and APNs and returns the config
// sections that point the channels at them (key files and CA files written
// to a temporary directory).
func mobileServices(t *testing.T, apnsTimeout time.Duration) (*mobilepushtest.FCM, *mobilepushtest.APNs, string) {
	t.Helper()
	fcm := mobilepushtest.NewFCM("shop-app")
	t.Cleanup(fcm.Close)
	apns := mobilepushtest.NewAPNs(apnsTeam, apnsKey)
	t.Cleanup(apns.Close)
	dir := t.TempDir()
	keyFile, p8 := filepath.Join(dir, "service-account.json"), filepath.Join(dir, "AuthKey.p8")
	if err := os.WriteFile(keyFile, fcm.ServiceAccountJSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p8, apns.KeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	fcmCA, err := mobilepushtest.WriteCA(fcm.Server, dir)
	if err != nil {
		t.Fatal(err)
	}
	apnsCA, err := mobilepushtest.WriteCA(apns.Server, dir)
	if err != nil {
		t.Fatal(err)
	}
	return fcm, apns, fmt.Sprintf(`  fcm: {service_account_file: %s, base_url: %s, ca_file: %s}
  apns: {key_id: %s, team_id: %s, private_key_file: %s, base_url: %s, ca_file: %s, timeout: %s}
`, keyFile, fcm.URL, fcmCA, apnsKey, apnsTeam, p8, apns.URL, apnsCA, apnsTimeout)
}

// ledger reads a notification's deliveries as "recipient/channel" ->
// "status last_error".
func ledger(t *testing.T, call func(method, path, token string, body any) (int, map[string]any), id string) map[string]string {
	t.Helper()
	_, n := call("GET", "/v1/notifications/"+id, servertest.AdminToken, nil)
	rows := map[string]string{}
	ds, _ := n["deliveries"].([]any)
	for _, d := range ds {
		d := d.(map[string]any)
		r, _ := d["recipient"].(string)
		e, _ := d["last_error"].(string)
		rows[r+"/"+d["channel"].(string)] = strings.TrimSpace(fmt.Sprint(d["status"]) + " " + e)
	}
	return rows
}

// A recipient with one iPhone and one Android phone, registered through the
// recipient API as the apps would, gets one notification on each; a token
// the push service no longer knows disappears after the first send; a
// recipient without devices is unavailable on both channels.
func TestEndToEndMobilePush(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	smtp := smtpcapture.Start(t)
	fcm, apns, sections := mobileServices(t, 10*time.Second)
	cfg := servertest.Config(t, servertest.BaseConfig+fmt.Sprintf(`
  order.shipped:
    channels:
      email: {subject: "Order {{.order}} shipped", text: "Order {{.order}} is on its way."}
      fcm: {title: "Order {{.order}} shipped", body: "On its way", url: "https://shop.test/orders/{{.order}}"}
      apns: {title: "Order {{.order}} shipped", body: "On its way", url: "https://shop.test/orders/{{.order}}"}
channels:
  email:
    from: "Shop <shop@shop.test>"
    smtp: {host: 127.0.0.1, port: %d}
%s`, smtp.Port(), sections))
	cfg.Database.URL = url
	call := apiCaller(t, runDaemon(t, cfg))

	for _, id := range []string{"ann", "bob"} {
		if code, _ := call("PUT", "/v1/recipients/"+id, servertest.AdminToken, map[string]any{"email": id + "@example.test"}); code != 200 {
			t.Fatalf("PUT recipient %s = %d", id, code)
		}
	}
	tok, err := notifyd.RecipientToken(servertest.TokenSecret, "ann", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	iphone, android, oldTablet := apns.Register(bundleID), fcm.Register(), fcm.Register()
	for _, d := range []map[string]any{
		{"platform": "ios", "token": iphone, "app": bundleID},
		{"platform": "android", "token": android, "app": bundleID},
		{"platform": "android", "token": oldTablet, "app": bundleID},
	} {
		if code, res := call("POST", "/v1/devices", tok, d); code != 201 {
			t.Fatalf("POST /v1/devices %v = %d %v", d["platform"], code, res)
		}
	}
	fcm.Unregister(oldTablet) // the app was uninstalled from the tablet

	code, res := call("POST", "/v1/notifications", servertest.AdminToken, map[string]any{
		"notifier": "order.shipped", "key": "o-42", "recipients": []any{"ann", "bob"}, "params": map[string]any{"order": "42"}})
	if code != 202 {
		t.Fatalf("POST notification = %d %v", code, res)
	}
	id := res["id"].(string)
	var rows map[string]string
	servertest.Eventually(t, 20*time.Second, "every delivery settled", func() bool {
		rows = ledger(t, call, id)
		return strings.HasPrefix(rows["ann/email"], "sent") && strings.HasPrefix(rows["ann/apns"], "sent") &&
			strings.HasPrefix(rows["ann/fcm"], "sent") && strings.HasPrefix(rows["bob/email"], "sent")
	})
	if rows["bob/fcm"] != "unavailable recipient has no android devices" ||
		rows["bob/apns"] != "unavailable recipient has no ios devices" {
		t.Errorf("bob without devices: %v", rows)
	}
	if f := append(fcm.Failures(), apns.Failures()...); len(f) > 0 {
		t.Fatalf("the push services refused: %v", f)
	}
	pushes := apns.Messages()
	if len(pushes) != 1 || pushes[0].Token != iphone || pushes[0].Topic != bundleID || pushes[0].Title() != "Order 42 shipped" ||
		pushes[0].CollapseID != "o-42" || pushes[0].Payload["url"] != "https://shop.test/orders/42" {
		t.Fatalf("APNs got %+v, want one push to the iPhone", pushes)
	}
	msgs := fcm.Messages()
	if len(msgs) != 1 || msgs[0].Token != android || msgs[0].Title != "Order 42 shipped" || msgs[0].Data["key"] != "o-42" ||
		msgs[0].Data["notifier"] != "order.shipped" || msgs[0].Data["id"] == "" {
		t.Fatalf("FCM accepted %+v, want one message to the Android phone", msgs)
	}
	if pushes[0].APNSID != pushes[0].Payload["id"] {
		t.Errorf("apns-id %q is not the delivery id %v", pushes[0].APNSID, pushes[0].Payload["id"])
	}

	// The uninstalled tablet's token is gone after that first send; the
	// others have their last success.
	servertest.Eventually(t, 10*time.Second, "the unregistered device removed, the others' successes recorded", func() bool {
		_, list := call("GET", "/v1/devices", tok, nil)
		devices, _ := list["devices"].([]any)
		if len(devices) != 2 {
			return false
		}
		for _, d := range devices {
			d := d.(map[string]any)
			if d["token"] == oldTablet || d["last_success_at"] == nil {
				return false
			}
		}
		return true
	})
}

// A push service that never answers holds up only its own deliveries: with
// APNs hung, the FCM and email deliveries of the same notification to the
// same recipients are all sent well inside APNs's timeout.
func TestHungAPNsHoldsUpOnlyItsOwnDeliveries(t *testing.T) {
	t.Parallel()
	const n, timeout = 60, 8 * time.Second
	pool, url := pgtest.NewDBURL(t)
	smtp := smtpcapture.Start(t)
	fcm, apns, sections := mobileServices(t, timeout)
	apns.Hang()
	cfg := servertest.Config(t, servertest.BaseConfig+fmt.Sprintf(`
  order.shipped:
    max_recipients: 1000
    channels:
      email: {subject: "Order {{.order}} shipped", text: "On its way."}
      fcm: {title: "Order {{.order}} shipped"}
      apns: {title: "Order {{.order}} shipped"}
channels:
  email:
    from: "Shop <shop@shop.test>"
    smtp: {host: 127.0.0.1, port: %d}
%s`, smtp.Port(), sections))
	cfg.Database.URL = url
	ctx := t.Context()
	var recipients []any
	for i := range n {
		rid := fmt.Sprintf("m%03d", i)
		recipients = append(recipients, rid)
		if _, err := pool.Exec(ctx, `INSERT INTO notify_recipients (id, email) VALUES ($1, $1 || '@example.test')`, rid); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO notify_devices (id, recipient, platform, token, app)
			VALUES (gen_random_uuid(), $1, 'ios', $2, $4), (gen_random_uuid(), $1, 'android', $3, $4)`,
			rid, apns.Register(bundleID), fcm.Register(), bundleID); err != nil {
			t.Fatal(err)
		}
	}
	call := apiCaller(t, runDaemon(t, cfg))

	start := time.Now()
	code, res := call("POST", "/v1/notifications", servertest.AdminToken, map[string]any{
		"notifier": "order.shipped", "key": "o-hung", "recipients": recipients, "params": map[string]any{"order": "7"}})
	if code != 202 {
		t.Fatalf("POST notification = %d %v", code, res)
	}
	id := res["id"].(string)
	servertest.Eventually(t, timeout-2*time.Second, "every FCM and email delivery sent", func() bool {
		return servertest.Count(t, pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1
			AND channel IN ('fcm', 'email') AND status = 'sent'`, id) == 2*n
	})
	t.Logf("%d FCM and %d email deliveries sent %s after the send, APNs hung", n, n, time.Since(start).Round(time.Millisecond))
	if apns.Held() == 0 {
		t.Fatal("the hung APNs got no request: the test measured nothing")
	}
	if got := fcm.Count(); got != n {
		t.Errorf("FCM accepted %d messages, want %d", got, n)
	}
	if got := len(smtp.Messages()); got != n {
		t.Errorf("SMTP got %d emails, want %d", got, n)
	}
	if servertest.Count(t, pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1
		AND channel = 'apns' AND status = 'sent'`, id) != 0 {
		t.Error("an APNs delivery was sent while APNs hung")
	}
}
