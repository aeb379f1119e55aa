package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels/webhook"
	"github.com/notifyd/notifyd/server/servertest"
)

const webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// receiver is an httptest webhook endpoint that answers from a script and
// records every request.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	answers  []int // status codes to answer, in order; 200 once exhausted
	requests []recorded
}

type recorded struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, answers ...int) *receiver {
	r := &receiver{answers: answers}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.requests = append(r.requests, recorded{header: req.Header.Clone(), body: body})
		code := 200
		if len(r.answers) > 0 {
			code, r.answers = r.answers[0], r.answers[1:]
		}
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) got() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.requests...)
}

func setupWebhook(t *testing.T, allowPrivate bool, bulkURL, slackURL string) *bundle {
	t.Helper()
	b := setup(t)
	yaml := servertest.BaseConfig + fmt.Sprintf(`
  build.failed:
    category: ci
    channels:
      in_app: {title: "Build {{.build}} failed"}
      webhook: {default: immediate, url: %q}
      slack: {webhook_url: %q, text: "Build {{.build}} failed"}
channels:
  webhook: {secret: %q, timeout: 2s, allow_private: %t}
  slack: {allow_private: true}
`, bulkURL, slackURL, webhookSecret, allowPrivate)
	if slackURL == "" {
		yaml = strings.Replace(yaml, "      slack: {webhook_url: \"\", text: \"Build {{.build}} failed\"}\n", "", 1)
	}
	if bulkURL == "" {
		yaml = strings.Replace(yaml, `, url: ""`, "", 1)
	}
	b.cfg = servertest.Config(t, yaml)
	b.deps.Config = b.cfg
	servertest.Wire(b.deps, servertest.Channels(t, b.cfg))
	b.deps.Backoff = func(int) time.Duration { return 100 * time.Millisecond }
	b.client = servertest.Client(t, b.pool, b.cfg)
	return b
}

func (b *bundle) hookProfile(t *testing.T, id, url string) {
	t.Helper()
	if _, err := b.pool.Exec(context.Background(), `INSERT INTO notify_recipients (id, webhook_url) VALUES ($1, $2)`, id, url); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) sendBuild(t *testing.T, key string, to ...string) string {
	t.Helper()
	n := notifyd.Notification{Notifier: "build.failed", Key: key, Params: map[string]any{"build": "#7"}}
	for _, r := range to {
		n.Recipients = append(n.Recipients, notifyd.Recipient{ID: r})
	}
	res, err := b.client.Send(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	return res.ID
}

func (b *bundle) waitChannel(t *testing.T, nid, recipient, channel, status string) delivery {
	t.Helper()
	var d delivery
	servertest.Eventually(t, 15*time.Second, fmt.Sprintf("%s delivery to %q becomes %s", channel, recipient, status), func() bool {
		err := b.pool.QueryRow(context.Background(), `SELECT id::text, status, coalesce(last_error, ''), attempts FROM notify_deliveries
			WHERE notification_id = $1 AND coalesce(recipient, '') = $2 AND channel = $3`, nid, recipient, channel).Scan(&d.id, &d.status, &d.lastError, &d.attempts)
		return err == nil && d.status == status
	})
	return d
}

func TestWebhook503ThenOKIsOneDeliveryWithTheSameID(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, true, "", "")
	rcv := newReceiver(t, 503)
	b.hookProfile(t, "u1", rcv.URL+"/hooks")
	nid := b.sendBuild(t, "b-503", "u1")
	servertest.StartWorkers(t, b.deps)
	d := b.waitChannel(t, nid, "u1", "webhook", "sent")
	reqs := rcv.got()
	if d.attempts != 2 || len(reqs) != 2 {
		t.Fatalf("attempts %d, requests %d; want 2 and 2", d.attempts, len(reqs))
	}
	for _, r := range reqs {
		if r.header.Get("webhook-id") != d.id {
			t.Fatalf("webhook-id = %q, want the delivery id %s on every attempt", r.header.Get("webhook-id"), d.id)
		}
		// Signed with u1's own secret, derived from the channel's.
		u1Secret, err := webhook.RecipientSecret(webhookSecret, "u1")
		if err != nil {
			t.Fatal(err)
		}
		if err := webhook.Verify(u1Secret, r.header, r.body, time.Minute); err != nil {
			t.Fatalf("signature: %v", err)
		}
	}
	var body struct {
		Type string `json:"type"`
		Data struct {
			ID     string         `json:"id"`
			Params map[string]any `json:"params"`
		} `json:"data"`
	}
	if err := json.Unmarshal(reqs[1].body, &body); err != nil || body.Type != "build.failed" || body.Data.ID != d.id || body.Data.Params["build"] != "#7" {
		t.Fatalf("body = %s (%v)", reqs[1].body, err)
	}
}

func TestWebhookRefusals(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, true, "", "")
	notFound := newReceiver(t, 404)
	gone := newReceiver(t, 410)
	b.hookProfile(t, "nf", notFound.URL)
	b.hookProfile(t, "gone", gone.URL)
	nid := b.sendBuild(t, "b-refused", "nf", "gone")
	servertest.StartWorkers(t, b.deps)
	if d := b.waitChannel(t, nid, "nf", "webhook", "refused"); d.attempts != 1 {
		t.Fatalf("404: attempts %d", d.attempts)
	}
	b.waitChannel(t, nid, "gone", "webhook", "refused")
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_recipients WHERE id = 'gone' AND webhook_gone_at IS NOT NULL`); n != 1 {
		t.Fatal("410 did not mark the webhook_url unusable")
	}
	// The next notification finds no usable URL: unavailable at fan-out.
	nid2 := b.sendBuild(t, "b-after-gone", "gone")
	if d := b.waitChannel(t, nid2, "gone", "webhook", "unavailable"); !strings.Contains(d.lastError, "webhook_url") {
		t.Fatalf("after 410: last_error %q", d.lastError)
	}
}

func TestWebhookPrivateAddressRefusedUnlessAllowed(t *testing.T) {
	t.Parallel()
	b := setupWebhook(t, false, "", "")
	rcv := newReceiver(t)
	b.hookProfile(t, "u1", rcv.URL)
	nid := b.sendBuild(t, "b-private", "u1")
	servertest.StartWorkers(t, b.deps)
	d := b.waitChannel(t, nid, "u1", "webhook", "refused")
	if !strings.Contains(d.lastError, "loopback") || len(rcv.got()) != 0 {
		t.Fatalf("refused with %q after %d requests", d.lastError, len(rcv.got()))
	}
}

func TestBulkWebhookAndSlack(t *testing.T) {
	t.Parallel()
	hook := newReceiver(t)
	slackRcv := newReceiver(t)
	b := setupWebhook(t, true, hook.URL+"/bulk", slackRcv.URL+"/services/T/B/X")
	nid := b.sendBuild(t, "b-bulk", "a", "b", "c")
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b, nid, "fanned_out")
	b.waitChannel(t, nid, "", "webhook", "sent")
	b.waitChannel(t, nid, "", "slack", "sent")
	if len(hook.got()) != 1 || len(slackRcv.got()) != 1 {
		t.Fatalf("bulk webhook got %d posts, slack %d; want one each for three recipients", len(hook.got()), len(slackRcv.got()))
	}
	if got := string(slackRcv.got()[0].body); got != `{"text":"Build #7 failed"}` {
		t.Fatalf("slack body = %s", got)
	}
	// Recipients without a webhook_url are unavailable, not queued.
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1 AND channel = 'webhook' AND recipient IS NOT NULL AND status = 'unavailable'`, nid); n != 3 {
		t.Fatalf("per-recipient webhook rows unavailable = %d, want 3", n)
	}
}

// A notification to a topic nobody subscribes to has an empty audience: it
// fans out to its Slack post and nothing else.
func TestEmptyAudienceStillPostsToSlack(t *testing.T) {
	t.Parallel()
	slackRcv := newReceiver(t)
	b := setupWebhook(t, true, "", slackRcv.URL+"/services/T/B/X")
	res, err := b.client.Send(context.Background(), notifyd.Notification{Notifier: "build.failed", Key: "b-nobody",
		Topics: []string{"builds-nobody-watches"}, Params: map[string]any{"build": "#7"}})
	if err != nil {
		t.Fatal(err)
	}
	nid := res.ID
	servertest.StartWorkers(t, b.deps)
	waitStatus(t, b, nid, "fanned_out")
	b.waitChannel(t, nid, "", "slack", "sent")
	if n := servertest.Count(t, b.pool, `SELECT count(*) FROM notify_deliveries WHERE notification_id = $1 AND recipient IS NOT NULL`, nid); n != 0 {
		t.Fatalf("%d per-recipient rows for a notification without recipients", n)
	}
}
