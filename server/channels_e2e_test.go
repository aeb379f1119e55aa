package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels/webpush"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/internal/testing/pushtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// TestEndToEndPushSMSAndEmailFailover runs the daemon with the three
// channels of this file's concern against real protocol peers: email to two
// SMTP servers of which the first is down, text messages to a local server
// speaking Twilio's Messages API, and web push to a local push service that
// checks the VAPID token and decrypts the payload with the subscription's
// private key. The subscription is registered through the recipient API as a
// browser would.
func TestEndToEndPushSMSAndEmailFailover(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	primary, secondary := smtpcapture.Start(t), smtpcapture.Start(t)
	primary.Down()

	var mu sync.Mutex
	var texts []map[string]string
	twilio := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		if r.URL.Path != "/2010-04-01/Accounts/AC00000000000000000000000000000001/Messages.json" ||
			user != "AC00000000000000000000000000000001" || pass != "tw-token" || r.ParseForm() != nil {
			http.Error(w, `{"code": 20003, "message": "Authenticate"}`, http.StatusUnauthorized)
			return
		}
		mu.Lock()
		texts = append(texts, map[string]string{"To": r.PostForm.Get("To"), "From": r.PostForm.Get("From"), "Body": r.PostForm.Get("Body")})
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"sid": "SM1", "status": "queued", "num_segments": "1"}`)
	}))
	defer twilio.Close()

	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	push := pushtest.New(pub)
	defer push.Close()

	cfg := servertest.Config(t, servertest.BaseConfig+fmt.Sprintf(`
  order.shipped:
    channels:
      email: {subject: "Order {{.order}} shipped", text: "Order {{.order}} is on its way."}
      sms: {text: "Order {{.order}} shipped"}
      web_push: {title: "Order {{.order}} shipped", body: "On its way", url: "https://shop.test/orders/{{.order}}"}
channels:
  email:
    from: "Shop <shop@shop.test>"
    smtp:
      - {host: 127.0.0.1, port: %d}
      - {host: 127.0.0.1, port: %d}
  sms: {account_sid: AC00000000000000000000000000000001, auth_token: tw-token, from: "+15005550006", base_url: %q}
  web_push: {vapid_public_key: %s, vapid_private_key: %s, subject: "mailto:ops@shop.test", allow_private: true}
`, primary.Port(), secondary.Port(), twilio.URL, pub, priv))
	cfg.Database.URL = url
	call := apiCaller(t, runDaemon(t, cfg))

	if code, _ := call("PUT", "/v1/recipients/u2", servertest.AdminToken,
		map[string]any{"email": "u2@example.test", "phone": "+14155550123"}); code != 200 {
		t.Fatalf("PUT recipient = %d", code)
	}
	tok, err := notifyd.RecipientToken(servertest.TokenSecret, "u2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	code, key := call("GET", "/v1/push-subscriptions/vapid-key", tok, nil)
	if code != 200 || key["public_key"] != pub {
		t.Fatalf("vapid key = %d %v", code, key)
	}
	browser := push.Subscribe()
	if code, res := call("POST", "/v1/push-subscriptions", tok, browser); code != 201 {
		t.Fatalf("POST subscription = %d %v", code, res)
	}
	gone := push.Subscribe() // a second browser, whose push service says it unsubscribed
	push.Answer(gone.Endpoint, http.StatusGone)
	if code, res := call("POST", "/v1/push-subscriptions", tok, gone); code != 201 {
		t.Fatalf("POST subscription = %d %v", code, res)
	}

	// u3 has an email address only: no phone, no push subscription.
	if code, _ := call("PUT", "/v1/recipients/u3", servertest.AdminToken, map[string]any{"email": "u3@example.test"}); code != 200 {
		t.Fatalf("PUT recipient = %d", code)
	}
	code, res := call("POST", "/v1/notifications", servertest.AdminToken, map[string]any{
		"notifier": "order.shipped", "key": "o-1", "recipients": []any{"u2", "u3"}, "params": map[string]any{"order": "42"}})
	if code != 202 {
		t.Fatalf("POST notification = %d %v", code, res)
	}
	id := res["id"].(string)

	var rows map[string]string // recipient/channel -> status (last_error)
	servertest.Eventually(t, 20*time.Second, "email, sms and web push settled", func() bool {
		_, n := call("GET", "/v1/notifications/"+id, servertest.AdminToken, nil)
		rows = map[string]string{}
		for _, d := range n["deliveries"].([]any) {
			d := d.(map[string]any)
			r, _ := d["recipient"].(string)
			e, _ := d["last_error"].(string)
			rows[r+"/"+d["channel"].(string)] = fmt.Sprint(d["status"]) + " " + e
		}
		return strings.HasPrefix(rows["u2/email"], "sent") && strings.HasPrefix(rows["u2/sms"], "sent") &&
			strings.HasPrefix(rows["u2/web_push"], "sent") && strings.HasPrefix(rows["u3/email"], "sent")
	})
	// Without a phone or a push subscription, u3 is unavailable on both, as
	// a recipient without an email address is on email: settled at fan-out
	// time, never a failure.
	if rows["u3/sms"] != "unavailable recipient has no phone" ||
		rows["u3/web_push"] != "unavailable recipient has no push subscriptions" {
		t.Errorf("u3 without a phone or a subscription: %v", rows)
	}

	if msgs := secondary.Messages(); len(msgs) != 2 || !strings.Contains(msgs[0].Text, "Order 42 is on its way") {
		t.Errorf("secondary SMTP server got %d messages, want the email", len(msgs))
	}
	mu.Lock()
	if len(texts) != 1 || texts[0]["To"] != "+14155550123" || texts[0]["Body"] != "Order 42 shipped" {
		t.Errorf("twilio got %v", texts)
	}
	mu.Unlock()
	if f := push.Failures(); len(f) > 0 {
		t.Fatalf("push service refused: %v", f)
	}
	pushed := push.Messages()
	if len(pushed) != 1 || pushed[0].Endpoint != browser.Endpoint {
		t.Fatalf("push service decrypted %d messages, want 1 to the live subscription", len(pushed))
	}
	var payload map[string]string
	if err := json.Unmarshal(pushed[0].Plaintext, &payload); err != nil {
		t.Fatal(err)
	}
	if payload["title"] != "Order 42 shipped" || payload["body"] != "On its way" || payload["url"] != "https://shop.test/orders/42" ||
		payload["notifier"] != "order.shipped" || payload["key"] != "o-1" || payload["id"] == "" {
		t.Errorf("payload = %v", payload)
	}
	// The subscription whose push service answered 410 is gone; the other
	// has its last success.
	// (Successes are written in batches, shortly after the send.)
	var list map[string]any
	servertest.Eventually(t, 10*time.Second, "the live subscription's success recorded, the gone one deleted", func() bool {
		_, list = call("GET", "/v1/push-subscriptions", tok, nil)
		subs, _ := list["subscriptions"].([]any)
		return len(subs) == 1 && subs[0].(map[string]any)["endpoint"] == browser.Endpoint &&
			subs[0].(map[string]any)["last_success_at"] != nil
	})
}

// Each push service is a target of its own: a push service that takes
// requests and never answers holds up the deliveries of the recipients
// subscribed there, and no others. Three of 300 recipients, spread over the
// send batches, are subscribed on the hung service; the other 297 pushes,
// to another push service, all arrive well inside the hung service's 6 s
// timeout (one lane for the whole channel made each batch with a hung
// recipient wait out that timeout, then park the rest of the lane).
func TestHungPushServiceHoldsUpOnlyItsOwnDeliveries(t *testing.T) {
	t.Parallel()
	const n, timeout = 300, 6 * time.Second
	pool, url := pgtest.NewDBURL(t)
	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	live := pushtest.New(pub)
	defer live.Close()
	stop := make(chan struct{})
	var held atomic.Int64
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held.Add(1)
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer hung.Close()
	defer close(stop) // runs first: Close waits for the held requests

	cfg := servertest.Config(t, servertest.BaseConfig+fmt.Sprintf(`
  order.shipped:
    max_recipients: 1000
    channels:
      web_push: {title: "Order {{.order}} shipped", body: "On its way"}
channels:
  web_push: {vapid_public_key: %s, vapid_private_key: %s, subject: "mailto:ops@shop.test", allow_private: true, timeout: %s}
`, pub, priv, timeout))
	cfg.Database.URL = url
	ctx := context.Background()
	onHung := map[int]bool{0: true, 150: true, 299: true}
	var recipients []any
	for i := range n {
		rid := fmt.Sprintf("p%03d", i)
		recipients = append(recipients, rid)
		sub := live.Subscribe()
		if onHung[i] {
			sub.Endpoint = hung.URL + "/push/" + rid
		}
		if _, err := pool.Exec(ctx, `INSERT INTO notify_recipients (id) VALUES ($1)`, rid); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO notify_push_subscriptions (id, recipient, endpoint, p256dh, auth)
			VALUES (gen_random_uuid(), $1, $2, $3, $4)`, rid, sub.Endpoint, sub.Keys.P256dh, sub.Keys.Auth); err != nil {
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
	servertest.Eventually(t, timeout-time.Second, "the live push service's messages", func() bool { return live.Count() >= n-len(onHung) })
	t.Logf("%d pushes to the live service arrived %s after the send", n-len(onHung), time.Since(start).Round(time.Millisecond))
	if f := live.Failures(); len(f) > 0 {
		t.Fatalf("live push service refused: %v", f)
	}
	if held.Load() == 0 {
		t.Fatal("the hung push service got no request: the test measured nothing")
	}

	// The hung service's deliveries time out and are due again; nothing
	// else of the notification is left unsent.
	servertest.Eventually(t, 3*timeout, "the hung service's deliveries failed at their timeout", func() bool {
		return servertest.Count(t, pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1 AND status = 'sent'`, id) == n-len(onHung) &&
			servertest.Count(t, pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1 AND status = 'failed'
				AND recipient = ANY($2) AND next_attempt_at IS NOT NULL`, id, []string{"p000", "p150", "p299"}) == len(onHung)
	})
}

// SMS against toll fraud: a phone outside channels.sms.allowed_countries is
// unavailable (never texted), and one recipient gets at most
// channels.sms.max_per_recipient_per_day texts, whatever the notifier; the
// rest are `throttled` with the reason, while other channels go on.
func TestSMSCountryAllowlistAndPerRecipientCap(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	var texts atomic.Int64
	twilio := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		texts.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"sid": "SM1", "status": "queued", "num_segments": "1"}`)
	}))
	defer twilio.Close()
	cfg := servertest.Config(t, servertest.BaseConfig+fmt.Sprintf(`
  code.sent:
    channels:
      sms: {text: "Your code is {{.code}}"}
  order.shipped:
    channels:
      sms: {text: "Order {{.code}} shipped"}
channels:
  sms:
    account_sid: AC00000000000000000000000000000001
    auth_token: tw-token
    from: "+15005550006"
    base_url: %q
    allowed_countries: ["1", "44"]
    max_per_recipient_per_day: 2
`, twilio.URL))
	cfg.Database.URL = url
	call := apiCaller(t, runDaemon(t, cfg))
	for id, phone := range map[string]string{"u1": "+14155550123", "u2": "+88213000000"} {
		if code, _ := call("PUT", "/v1/recipients/"+id, servertest.AdminToken, map[string]any{"phone": phone}); code != 200 {
			t.Fatalf("PUT recipient %s = %d", id, code)
		}
	}
	var ids []string
	for i, notifier := range []string{"code.sent", "order.shipped", "code.sent", "order.shipped"} {
		code, res := call("POST", "/v1/notifications", servertest.AdminToken, map[string]any{
			"notifier": notifier, "key": fmt.Sprint("k-", i), "recipients": []any{"u1", "u2"}, "params": map[string]any{"code": fmt.Sprint(i)}})
		if code != 202 {
			t.Fatalf("POST notification = %d %v", code, res)
		}
		ids = append(ids, res["id"].(string))
	}
	statuses := map[string]int{}
	servertest.Eventually(t, 20*time.Second, "every text settled", func() bool {
		statuses = map[string]int{}
		for _, id := range ids {
			_, n := call("GET", "/v1/notifications/"+id, servertest.AdminToken, nil)
			for _, d := range n["deliveries"].([]any) {
				d := d.(map[string]any)
				e, _ := d["last_error"].(string)
				key := fmt.Sprint(d["recipient"], " ", d["status"])
				switch {
				case strings.Contains(e, "per-recipient cap"):
					key += " (cap)"
				case strings.Contains(e, "allowed_countries"):
					key += " (country)"
				}
				statuses[key]++
			}
		}
		return statuses["u1 sent"]+statuses["u1 throttled (cap)"] == 4 && statuses["u2 unavailable (country)"] == 4
	})
	if statuses["u1 sent"] != 2 || statuses["u1 throttled (cap)"] != 2 {
		t.Fatalf("u1's texts: %v, want 2 sent and 2 throttled by the cap", statuses)
	}
	if n := texts.Load(); n != 2 {
		t.Fatalf("Twilio got %d texts, want 2", n)
	}
}
