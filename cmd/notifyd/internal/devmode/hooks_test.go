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

// CaptureProviders points the SMS providers (each entry of the list), the
// WhatsApp and the Telegram APIs at the dev receiver, filling in the
// secrets left to unset variables: each channel then sends there, the
// receiver answers as the provider does (so the provider's message id is
// recorded) and keeps the message for /dev/.
func TestCaptureProvidersAnswersAsEachProvider(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse("dev.yaml", []byte(`
channels:
  sms:
    providers:
      - {kind: twilio, account_sid: AC0123456789abcdef0123456789abcdef, auth_token: "", from: "+15005550006"}
      - {kind: vonage, name: backup, application_id: aaaaaaaa-bbbb-4ccc-8ddd-0123456789ab, from: Acme}
  whatsapp: {provider: cloud_api, phone_number_id: "1065403522", access_token: ""}
  telegram: {bot_token: ""}
notifiers:
  order.shipped:
    channels:
      sms: {text: "Order {{.order}} shipped"}
      whatsapp: {template: {name: order_shipped, language: en_US, params: ["{{.order}}"]}}
      telegram: {text: "Order {{.order}} shipped"}
`))
	if err != nil {
		t.Fatal(err)
	}
	h, err := StartHooks()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := CaptureProviders(cfg, h); err != nil {
		t.Fatal(err)
	}
	set, err := builtin.MustRegistry().Open(cfg, nil, nil)
	if err != nil {
		t.Fatalf("the captured config does not open: %v", err)
	}
	defer set.Close()
	for _, c := range []struct{ channel, provider, id string }{
		{"sms", "twilio (1 segment)", "SMdev"},
		{"whatsapp", "cloud_api", "wamid.dev"},
		{"telegram", "telegram", ""},
	} {
		ch, ok := set.Channels[c.channel]
		if !ok {
			t.Fatalf("%s did not open", c.channel)
		}
		ctx, rep := channels.WithReport(context.Background())
		err := ch.Send(ctx, channels.Message{DeliveryID: "d-1", Notifier: "order.shipped",
			Params: map[string]any{"order": "A-17"},
			Recipient: &channels.Recipient{ID: "u1", Phone: "+14155550123",
				Data: map[string]any{"telegram_chat_id": float64(987654321)}}})
		if err != nil {
			t.Fatalf("%s: %v", c.channel, err)
		}
		if rep.Provider != c.provider || rep.ProviderMessageID == "" || !strings.HasPrefix(rep.ProviderMessageID, c.id) {
			t.Errorf("%s: report %q %q", c.channel, rep.Provider, rep.ProviderMessageID)
		}
	}
	got := map[string]bool{}
	for _, r := range h.Requests() {
		got[r.Channel] = true
		if strings.Contains(r.Body, "dev-") {
			t.Errorf("a captured body shows a credential: %s", r.Body)
		}
	}
	if !got["sms"] || !got["whatsapp"] || !got["telegram"] {
		t.Errorf("captured %v, want sms, whatsapp and telegram", got)
	}
	if v, _ := cfg.Channels["sms"].Value("providers.1.base_url"); !strings.HasSuffix(v, "/provider/sms/backup") {
		t.Errorf("the second sms provider's base_url is %q", v)
	}
}
