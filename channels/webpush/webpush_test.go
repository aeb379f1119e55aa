package webpush_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/webpush"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/pushtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// subscriptions is an in-memory channels.PushSubscriptions: the channel's
// edge to the daemon's store (the store itself is tested against
// PostgreSQL in stores and end to end in server).
type subscriptions struct {
	mu        sync.Mutex
	subs      []channels.PushSubscription
	succeeded []string
	failed    []string
	lists     int // List calls
}

func (m *subscriptions) add(recipient string, s pushtest.Subscription) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	id := "sub-" + string(rune('a'+len(m.subs)))
	m.subs = append(m.subs, channels.PushSubscription{ID: id, Recipient: recipient, Endpoint: s.Endpoint,
		P256dh: s.Keys.P256dh, Auth: s.Keys.Auth})
	return id
}

func (m *subscriptions) List(_ context.Context, recipients []string) (map[string][]channels.PushSubscription, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lists++
	out := map[string][]channels.PushSubscription{}
	for _, s := range m.subs {
		if slices.Contains(recipients, s.Recipient) {
			out[s.Recipient] = append(out[s.Recipient], s)
		}
	}
	return out, nil
}

func (m *subscriptions) Succeeded(_ context.Context, ids []string) error {
	m.mu.Lock()
	m.succeeded = append(m.succeeded, ids...)
	m.mu.Unlock()
	return nil
}

func (m *subscriptions) Failed(_ context.Context, ids []string) error {
	m.mu.Lock()
	m.failed = append(m.failed, ids...)
	m.mu.Unlock()
	return nil
}

func (m *subscriptions) Remove(_ context.Context, ids []string) error {
	m.mu.Lock()
	m.subs = slices.DeleteFunc(m.subs, func(s channels.PushSubscription) bool { return slices.Contains(ids, s.ID) })
	m.mu.Unlock()
	return nil
}

func (m *subscriptions) ids() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, s := range m.subs {
		out = append(out, s.ID)
	}
	return out
}

type bundle struct {
	push   *pushtest.Server
	store  *subscriptions
	sender *webpush.Sender
	cfg    *webpush.Config
}

func setup(t *testing.T, mod ...func(*webpush.Config)) bundle {
	t.Helper()
	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	push := pushtest.New(pub)
	t.Cleanup(push.Close)
	cfg := &webpush.Config{VAPIDPublicKey: pub, VAPIDPrivateKey: priv, Subject: "mailto:ops@acme.test",
		TTL: config.Duration(time.Hour), Timeout: config.Duration(5 * time.Second), AllowPrivate: true}
	for _, f := range mod {
		f(cfg)
	}
	store := &subscriptions{}
	s, err := webpush.New(cfg, map[string]*webpush.Templates{
		"comment.created": {Title: "New comment on {{.post}}", Body: "{{.author}}: {{.body}}", URL: "https://app.acme.test/posts/{{.post}}"},
	}, store, webpush.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return bundle{push: push, store: store, sender: s, cfg: cfg}
}

func message(body string) channels.Message {
	return channels.Message{DeliveryID: "d-1", NotificationID: "n-1", Notifier: "comment.created", Key: "c-1",
		Recipient: &channels.Recipient{ID: "u1"},
		Params:    map[string]any{"post": "hello", "author": "Ada", "body": body}}
}

func send(s *webpush.Sender, m channels.Message) (string, error) {
	ctx, rep := channels.WithReport(context.Background())
	err := s.Send(ctx, m)
	return rep.Provider, err
}

func TestSendEncryptsForEverySubscription(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.store.add("u1", b.push.Subscribe())
	c := b.store.add("u1", b.push.Subscribe())
	b.store.add("someone-else", b.push.Subscribe())

	provider, err := send(b.sender, message("nice"))
	if err != nil {
		t.Fatal(err)
	}
	if f := b.push.Failures(); len(f) > 0 {
		t.Fatalf("push service refused: %v", f)
	}
	msgs := b.push.Messages()
	if len(msgs) != 2 {
		t.Fatalf("push service decrypted %d messages, want 2 (one per subscription of u1)", len(msgs))
	}
	for _, m := range msgs {
		var got map[string]string
		if err := json.Unmarshal(m.Plaintext, &got); err != nil {
			t.Fatalf("payload %q: %v", m.Plaintext, err)
		}
		want := map[string]string{"id": "d-1", "notifier": "comment.created", "key": "c-1", "title": "New comment on hello",
			"body": "Ada: nice", "url": "https://app.acme.test/posts/hello"}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("payload %s = %q, want %q", k, got[k], v)
			}
		}
		if m.TTL != "3600" || m.Urgency != "normal" {
			t.Errorf("TTL %q, Urgency %q", m.TTL, m.Urgency)
		}
	}
	if !slices.Equal(b.store.succeeded, []string{a, c}) {
		t.Errorf("succeeded = %v, want %v", b.store.succeeded, []string{a, c})
	}
	if want := strings.TrimPrefix(b.push.URL, "http://"); provider != want {
		t.Errorf("provider = %q, want %q", provider, want)
	}
}

func TestGoneSubscriptionsAreRemoved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s1, s2, s3 := b.push.Subscribe(), b.push.Subscribe(), b.push.Subscribe()
	b.store.add("u1", s1)
	b.store.add("u1", s2)
	keep := b.store.add("u1", s3)
	b.push.Answer(s1.Endpoint, http.StatusGone)
	b.push.Answer(s2.Endpoint, http.StatusNotFound)

	if _, err := send(b.sender, message("x")); err != nil {
		t.Fatalf("one subscription took it, want sent: %v", err)
	}
	if got := b.store.ids(); !slices.Equal(got, []string{keep}) {
		t.Errorf("subscriptions left = %v, want only %s", got, keep)
	}

	// The last one gone too: refused.
	b.push.Answer(s3.Endpoint, http.StatusGone)
	_, err := send(b.sender, message("x"))
	if k, _ := channels.Classify(err); err == nil || k != channels.KindPermanent {
		t.Fatalf("every subscription gone: %v, want refused", err)
	}
	if got := b.store.ids(); len(got) != 0 {
		t.Errorf("subscriptions left = %v", got)
	}
	_, err = send(b.sender, message("x"))
	if err == nil || !strings.Contains(err.Error(), "no push subscriptions") {
		t.Errorf("no subscriptions: %v", err)
	}
}

func TestRetryableAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s1, s2 := b.push.Subscribe(), b.push.Subscribe()
	id1 := b.store.add("u1", s1)
	id2 := b.store.add("u1", s2)

	b.push.Answer(s1.Endpoint, http.StatusInternalServerError)
	b.push.Answer(s2.Endpoint, http.StatusServiceUnavailable)
	_, err := send(b.sender, message("x"))
	if k, _ := channels.Classify(err); err == nil || k != channels.KindTemporary {
		t.Fatalf("5xx: %v, want temporary", err)
	}
	if !strings.Contains(err.Error(), "HTTP 500") || !strings.Contains(err.Error(), "HTTP 503") {
		t.Errorf("error %q does not name both answers", err)
	}
	if !slices.Equal(b.store.failed, []string{id1, id2}) {
		t.Errorf("failed = %v", b.store.failed)
	}

	b.push.Answer(s1.Endpoint, http.StatusTooManyRequests)
	b.push.Answer(s2.Endpoint, http.StatusInternalServerError)
	_, err = send(b.sender, message("x"))
	if k, after := channels.Classify(err); err == nil || k != channels.KindRateLimited || after != 30*time.Second {
		t.Fatalf("429: %v (%v after %v), want rate limited after 30s", err, k, after)
	}
	if n := len(b.store.ids()); n != 2 {
		t.Errorf("a retryable answer removed a subscription: %d left", n)
	}
}

func TestPrivateEndpointRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *webpush.Config) { c.AllowPrivate = false })
	sub := b.push.Subscribe() // on 127.0.0.1
	b.store.add("u1", sub)
	_, err := send(b.sender, message("x"))
	// Refused by the registration's checks, applied again at send time (a
	// subscription stored before allow_private was turned off), before any
	// connection: the connect-time guard is the second line.
	if k, _ := channels.Classify(err); err == nil || k != channels.KindPermanent || !strings.Contains(err.Error(), "endpoint refused") {
		t.Fatalf("private endpoint: %v, want refused", err)
	}
	if n := len(b.push.Messages()) + len(b.push.Failures()); n != 0 {
		t.Errorf("the push service was reached %d times", n)
	}
	for _, tc := range []struct {
		endpoint string
		ok       bool
	}{
		{"https://fcm.googleapis.com/fcm/send/abc", true},
		{"https://updates.push.services.mozilla.com/wpush/v2/x", true},
		{"http://fcm.googleapis.com/fcm/send/abc", false},
		{"https://127.0.0.1/push", false},
		{"https://10.1.2.3/push", false},
		{"https://[::1]/push", false},
		{"https://localhost:8443/push", false},
		{"https://127.1/push", false},
		{"https://2130706433/push", false},
		{"https://0x7f.0.0.1/push", false},
		{"https://0177.0.0.1/push", false},
		{"https://localhost./push", false},
		{"https://push.example.test./push", false},
		{"https://LOCALHOST/push", false},
		{"https://a.localhost/push", false},
		{"https://[::ffff:127.0.0.1]/push", false},
		{"https://[fe80::1%25eth0]/push", false},
		{"https://8.8.8.8/push", false}, // public, but an IP literal all the same
		{"https://fcm.googleapis.com:25/x", false},
		{"https://fcm.googleapis.com:6379/x", false},
		{"https://fcm.googleapis.com:443/fcm/send/abc", true},
		{"https://push.ex%61mple.test/x", false},
		{"https://xn--bcher-kva.example/x", true},
		{"https://1.2.3.4.example/x", true}, // a name, not an address: its last label is not a number
		{"https://user:pw@push.example.test/x", false},
		{"ftp://push.example.test/x", false},
		{"not a url", false},
	} {
		if err := b.sender.CheckEndpoint(tc.endpoint); (err == nil) != tc.ok {
			t.Errorf("CheckEndpoint(%q) = %v, want ok %v", tc.endpoint, err, tc.ok)
		}
	}
}

func TestLongBodyIsCutToFit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.store.add("u1", b.push.Subscribe())
	if _, err := send(b.sender, message(strings.Repeat("é", 5000))); err != nil {
		t.Fatal(err)
	}
	msgs := b.push.Messages()
	if len(msgs) != 1 || len(msgs[0].Plaintext) > webpush.MaxPayload {
		t.Fatalf("messages %d, payload %d bytes", len(msgs), len(msgs[0].Plaintext))
	}
	var got map[string]string
	if err := json.Unmarshal(msgs[0].Plaintext, &got); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got["body"], "…") || !strings.HasPrefix(got["body"], "Ada: éé") {
		t.Errorf("body = %.40q…", got["body"])
	}
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	reg, err := channels.NewRegistry(webpush.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, _ := webpush.GenerateVAPIDKeys()
	otherPub, _, _ := webpush.GenerateVAPIDKeys()
	good := "channels:\n  web_push: {vapid_public_key: " + pub + ", vapid_private_key: " + priv +
		", subject: 'mailto:ops@acme.test'}\nnotifiers:\n  n:\n    channels:\n      web_push: {title: Hi}\n"
	c, err := config.ParseWith("test.yaml", []byte(good), reg.Check)
	if err != nil {
		t.Fatal(err)
	}
	set, err := reg.Open(c, nil, nil, channels.WithPushSubscriptions(&subscriptions{}))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if _, ok := set.Channels[webpush.Name]; !ok {
		t.Fatal("web_push is not configured")
	}
	bare, err := reg.Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	err = bare.Channels[webpush.Name].Send(context.Background(), message("x"))
	if k, _ := channels.Classify(err); err == nil || k != channels.KindTemporary || !strings.Contains(err.Error(), "store") {
		t.Errorf("a send without a store: %v, want temporary", err)
	}

	for _, tc := range []struct{ name, section, want string }{
		{"short public key", "{vapid_public_key: AAAA, vapid_private_key: " + priv + ", subject: 'mailto:a@b.test'}",
			"test.yaml:2: channels.web_push.vapid_public_key: want unpadded base64url of an uncompressed P-256 point (65 bytes)"},
		{"short private key", "{vapid_public_key: " + pub + ", vapid_private_key: AAAA, subject: 'mailto:a@b.test'}",
			"test.yaml:2: channels.web_push.vapid_private_key: want unpadded base64url of a P-256 private key (32 bytes)"},
		{"keys of two pairs", "{vapid_public_key: " + otherPub + ", vapid_private_key: " + priv + ", subject: 'mailto:a@b.test'}",
			"vapid_public_key: is not the public key of vapid_private_key"},
		{"bad subject", "{vapid_public_key: " + pub + ", vapid_private_key: " + priv + ", subject: 'http://acme.test'}",
			"channels.web_push.subject: want a mailto: or https: URL"},
		{"bad ttl", "{vapid_public_key: " + pub + ", vapid_private_key: " + priv + ", subject: 'https://acme.test', ttl: 1000h}",
			"channels.web_push.ttl: must be between 0 and 28 days"},
		{"allowed host that is an address", "{vapid_public_key: " + pub + ", vapid_private_key: " + priv + ", subject: 'https://acme.test', allowed_hosts: [fcm.googleapis.com, '127.1']}",
			"channels.web_push.allowed_hosts[1]: want a host name or *.suffix"},
	} {
		_, err := config.ParseWith("test.yaml", []byte("channels:\n  web_push: "+tc.section+"\n"), reg.Check)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v\nwant %s", tc.name, err, tc.want)
		}
	}
	_, err = config.ParseWith("test.yaml", []byte("notifiers:\n  n:\n    channels:\n      web_push: {body: '{{.x'}\n"), reg.Check)
	if err == nil || !strings.Contains(err.Error(), "notifiers.n.channels.web_push.title: must be set") ||
		!strings.Contains(err.Error(), "notifiers.n.channels.web_push.body:") {
		t.Errorf("bad templates: %v", err)
	}
}

// A send batch's subscriptions are read once (Prepare); each Send carrying
// the prepared read uses it and reads nothing itself.
func TestPreparedBatchReadsSubscriptionsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.store.add("u1", b.push.Subscribe())
	b.store.add("u2", b.push.Subscribe())
	p, err := b.sender.Prepare(context.Background(), []string{"u1", "u2", "u3"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := channels.WithPrepared(context.Background(), p)
	for _, r := range []string{"u1", "u2"} {
		m := message("hi")
		m.Recipient = &channels.Recipient{ID: r}
		if err := b.sender.Send(ctx, m); err != nil {
			t.Fatalf("send to %s: %v", r, err)
		}
	}
	m := message("hi")
	m.Recipient = &channels.Recipient{ID: "u3"}
	if err := b.sender.Send(ctx, m); err == nil || !strings.Contains(err.Error(), "no push subscriptions") {
		t.Fatalf("send to u3 (no subscriptions in the batch's read): %v", err)
	}
	b.store.mu.Lock()
	lists := b.store.lists
	b.store.mu.Unlock()
	if lists != 1 || len(b.push.Messages()) != 2 {
		t.Fatalf("%d subscription reads, %d pushes; want 1 read for the batch and 2 pushes", lists, len(b.push.Messages()))
	}
}

// A delivery's target is the push services of its recipient's
// subscriptions, from the batch's prepared read: one per service, sorted and
// joined for a recipient on several, "" (the channel) without a prepared
// read or without subscriptions.
func TestTargetIsThePushServicesOfTheSubscriptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := pushtest.New(b.cfg.VAPIDPublicKey)
	defer other.Close()
	b.store.add("u1", b.push.Subscribe())
	b.store.add("u2", other.Subscribe())
	b.store.add("u2", b.push.Subscribe())
	b.store.add("u2", b.push.Subscribe())
	prepared, err := b.sender.Prepare(context.Background(), []string{"u1", "u2", "u3"})
	if err != nil {
		t.Fatal(err)
	}
	target := func(v any, rid string) string {
		return b.sender.TargetPrepared(v, channels.Message{Notifier: "comment.created", Recipient: &channels.Recipient{ID: rid}})
	}
	svc, otherSvc := channels.URLHost(b.push.URL), channels.URLHost(other.URL)
	both := []string{svc, otherSvc}
	slices.Sort(both)
	for _, c := range []struct {
		rid  string
		v    any
		want string
	}{
		{"u1", prepared, svc},
		{"u2", prepared, both[0] + " + " + both[1]},
		{"u3", prepared, ""},
		{"u1", nil, ""},
	} {
		if got := target(c.v, c.rid); got != c.want {
			t.Errorf("target of %s (prepared %v) = %q, want %q", c.rid, c.v != nil, got, c.want)
		}
	}
}

// A recipient's subscriptions are pushed to at once: one on a push service
// that never answers does not hold back the message to the other, which
// arrives while the first request is still waiting.
func TestSubscriptionsArePushedToAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *webpush.Config) { c.Timeout = config.Duration(30 * time.Second) })
	release := make(chan struct{})
	var once sync.Once
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer hung.Close()
	defer once.Do(func() { close(release) })
	s := b.push.Subscribe()
	s.Endpoint = hung.URL + "/push/first"
	b.store.add("u1", s)
	b.store.add("u1", b.push.Subscribe())

	errc := make(chan error, 1)
	go func() {
		_, err := send(b.sender, message("nice"))
		errc <- err
	}()
	servertest.Eventually(t, 10*time.Second, "the live subscription to get its message while the other request hangs", func() bool {
		select {
		case err := <-errc:
			t.Fatalf("send returned (%v) before the live subscription got its message", err)
		default:
		}
		return b.push.Count() > 0
	})
	once.Do(func() { close(release) })
	if err := <-errc; err != nil {
		t.Fatalf("send = %v, want sent (one subscription took it)", err)
	}
}

// With channels.web_push.allowed_hosts, an endpoint must name a listed host
// or a host under a listed "*.suffix"; the other checks still apply.
func TestAllowedHosts(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *webpush.Config) {
		c.AllowPrivate = false
		c.AllowedHosts = []string{"fcm.googleapis.com", "*.push.services.mozilla.com"}
	})
	for _, tc := range []struct {
		endpoint string
		ok       bool
	}{
		{"https://fcm.googleapis.com/fcm/send/abc", true},
		{"https://FCM.googleapis.com/fcm/send/abc", true},
		{"https://updates.push.services.mozilla.com/wpush/v2/x", true},
		{"https://push.services.mozilla.com/wpush/v2/x", false},
		{"https://evil.example/x", false},
		{"https://fcm.googleapis.com.evil.example/x", false},
		{"https://fcm.googleapis.com:8443/x", false},
	} {
		if err := b.sender.CheckEndpoint(tc.endpoint); (err == nil) != tc.ok {
			t.Errorf("CheckEndpoint(%q) = %v, want ok %v", tc.endpoint, err, tc.ok)
		}
	}
}

// At registration the endpoint's host is resolved: a name that resolves to a
// special-purpose address is refused, one that resolves to a public address
// or does not resolve now is accepted (the connect-time guard checks it at
// every send).
func TestEndpointHostIsResolvedAtRegistration(t *testing.T) {
	t.Parallel()
	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &webpush.Config{VAPIDPublicKey: pub, VAPIDPrivateKey: priv, Subject: "mailto:ops@acme.test",
		TTL: config.Duration(time.Hour), Timeout: config.Duration(5 * time.Second)}
	dns := map[string][]netip.Addr{
		"rebind.example.test":   {netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("127.0.0.1")},
		"metadata.example.test": {netip.MustParseAddr("169.254.169.254")},
		"mapped.example.test":   {netip.MustParseAddr("::ffff:10.0.0.1")},
		"push.example.test":     {netip.MustParseAddr("93.184.216.34")},
	}
	s, err := webpush.New(cfg, nil, &subscriptions{}, webpush.Options{Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
		if a, ok := dns[host]; ok {
			return a, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		endpoint, want string // want "" is accepted
	}{
		{"https://rebind.example.test/x", "resolves to 127.0.0.1, a loopback address"},
		{"https://metadata.example.test/x", "resolves to 169.254.169.254"},
		{"https://mapped.example.test/x", "resolves to 10.0.0.1"},
		{"https://push.example.test/x", ""},
		{"https://unknown.example.test/x", ""},
	} {
		err := s.CheckEndpoint(tc.endpoint)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckEndpoint(%s) = %v, want %q", tc.endpoint, err, tc.want)
		}
	}
}
