package devmode

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/config"
)

// CaptureHooks points every notifier-level webhook and every Slack, Discord
// and Teams webhook_url at the dev receiver; the channels then deliver there
// (loopback allowed), and the receiver keeps each message for /dev/. A
// per-recipient webhook (no url) is left alone.
func TestCaptureHooksDeliversEveryChatAndWebhook(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("dev.yaml", []byte(`
channels:
  webhook: {secret: dev-webhook-secret-0123456789abcdef}
notifiers:
  deploy:
    channels:
      webhook: {url: "https://billing.acme.test/hooks"}
      slack: {webhook_url: "https://hooks.slack.test/services/T/B/X", text: "deployed"}
      discord: {webhook_url: "https://discord.test/api/webhooks/1/x", text: "deployed"}
      teams: {webhook_url: "https://acme.webhook.office.test/x", title: "Deploy", text: "deployed"}
  mention:
    channels:
      webhook: {default: immediate}
`))
	if err != nil {
		t.Fatal(err)
	}
	h, err := StartHooks()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := CaptureHooks(cfg, h); err != nil {
		t.Fatal(err)
	}
	if v, _ := cfg.Notifiers["mention"].Channels["webhook"].Section.Value("url"); v != "" {
		t.Fatalf("a per-recipient webhook got a url: %q", v)
	}
	set, err := builtin.MustRegistry().Open(cfg, nil, nil)
	if err != nil {
		t.Fatalf("the captured config does not open: %v", err)
	}
	defer set.Close()
	for _, name := range []string{"webhook", "slack", "discord", "teams"} {
		ch, ok := set.Bulk[name]
		if !ok || !ch.Configured("deploy") {
			t.Fatalf("%s is not configured for deploy", name)
		}
		if err := ch.SendBulk(context.Background(), channels.Message{DeliveryID: "0190b8a4-6d3e-7c1a-9f00-2b1c3d4e5f60",
			NotificationID: "0190b8a4-6d3e-7c1a-9f00-2b1c3d4e5f61", Notifier: "deploy", Key: "d-1"}); err != nil {
			t.Fatalf("%s to the dev receiver: %v", name, err)
		}
	}
	var got []string
	for _, r := range h.Requests() {
		got = append(got, r.Channel+" "+r.Notifier)
		if r.Body == "" {
			t.Errorf("%s captured without its body", r.Channel)
		}
	}
	if want := "teams deploy,discord deploy,slack deploy,webhook deploy"; strings.Join(got, ",") != want {
		t.Fatalf("captured %v, want %s (newest first)", got, want)
	}
}

// Dev mode opens loopback to the notifier webhooks it captures, and to no
// recipient's webhook_url: a profile naming a loopback address is refused
// as in production, and nothing reaches it.
func TestCaptureHooksLeavesRecipientWebhooksGuarded(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("dev.yaml", []byte(`
channels:
  webhook: {secret: dev-webhook-secret-0123456789abcdef}
notifiers:
  deploy:
    channels:
      webhook: {url: "https://billing.acme.test/hooks", default: immediate}
`))
	if err != nil {
		t.Fatal(err)
	}
	h, err := StartHooks()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := CaptureHooks(cfg, h); err != nil {
		t.Fatal(err)
	}
	var hits atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer internal.Close()
	set, err := builtin.MustRegistry().Open(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	msg := channels.Message{DeliveryID: "0190b8a4-6d3e-7c1a-9f00-2b1c3d4e5f60",
		NotificationID: "0190b8a4-6d3e-7c1a-9f00-2b1c3d4e5f61", Notifier: "deploy", Key: "d-1"}
	if err := set.Bulk["webhook"].SendBulk(context.Background(), msg); err != nil {
		t.Fatalf("the notifier webhook to the dev receiver: %v", err)
	}
	msg.Recipient = &channels.Recipient{ID: "u1", WebhookURL: internal.URL + "/admin"}
	err = set.Channels["webhook"].Send(context.Background(), msg)
	if kind, _ := channels.Classify(err); err == nil || kind != channels.KindPermanent {
		t.Fatalf("a recipient's loopback webhook_url in dev mode: %v, want refused", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the loopback server got %d requests", n)
	}
}
