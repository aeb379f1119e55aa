package fcm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/fcm"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/mobilepushtest"
)

// clock is a test clock that starts now and moves when told.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

type bundle struct {
	fcm    *mobilepushtest.FCM
	store  *mobilepushtest.Devices
	sender *fcm.Sender
	clock  *clock
}

// setup starts a local FCM and opens the channel on it through the
// registry, as the daemon does: the key file and the CA file on disk, the
// section in YAML.
func setup(t *testing.T, opts ...mobilepushtest.FCMOption) bundle {
	t.Helper()
	c := &clock{}
	f := mobilepushtest.NewFCM("acme-app", append([]mobilepushtest.FCMOption{mobilepushtest.WithFCMClock(c.now)}, opts...)...)
	t.Cleanup(f.Close)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "service-account.json")
	if err := os.WriteFile(keyFile, f.ServiceAccountJSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, err := mobilepushtest.WriteCA(f.Server, dir)
	if err != nil {
		t.Fatal(err)
	}
	store := &mobilepushtest.Devices{}
	s := open(t, fmt.Sprintf(`channels:
  fcm:
    service_account_file: %s
    base_url: %s
    ca_file: %s
    timeout: 5s
notifiers:
  comment.created:
    channels:
      fcm: {title: "New comment on {{.post}}", body: "{{.author}}: {{.body}}", url: "https://app.acme.test/posts/{{.post}}"}
`, keyFile, f.URL, ca), store, c.now)
	return bundle{fcm: f, store: store, sender: s, clock: c}
}

func open(t *testing.T, yaml string, store channels.Devices, now func() time.Time) *fcm.Sender {
	t.Helper()
	reg, err := channels.NewRegistry(fcm.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.ParseWith("test.yaml", []byte(yaml), reg.Check)
	if err != nil {
		t.Fatal(err)
	}
	set, err := reg.Open(cfg, nil, now, channels.WithDevices(store))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	v, ok := set.Opened(fcm.Name)
	if !ok {
		t.Fatal("fcm is not configured")
	}
	return v.(*fcm.Sender)
}

func message(rid, body string) channels.Message {
	return channels.Message{DeliveryID: "01900000-0000-7000-8000-000000000001", NotificationID: "n-1",
		Notifier: "comment.created", Key: "c-1", Recipient: &channels.Recipient{ID: rid},
		Params: map[string]any{"post": "hello", "author": "Ada", "body": body}}
}

func TestSendsToEachAndroidDevice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	phone, tablet := b.fcm.Register(), b.fcm.Register()
	p := b.store.Add("u1", fcm.Platform, phone, "com.acme.app")
	tb := b.store.Add("u1", fcm.Platform, tablet, "com.acme.app")
	b.store.Add("u1", "ios", strings.Repeat("ab", 32), "com.acme.app") // not this channel's
	b.store.Add("u2", fcm.Platform, b.fcm.Register(), "com.acme.app")  // not this recipient's

	ctx, report := channels.WithReport(context.Background())
	if err := b.sender.Send(ctx, message("u1", "Nice post")); err != nil {
		t.Fatalf("Send = %v (fcm refused: %v)", err, b.fcm.Failures())
	}
	msgs := b.fcm.Messages()
	if len(msgs) != 2 {
		t.Fatalf("FCM got %d messages, want one per Android device of u1: %+v", len(msgs), msgs)
	}
	var tokens []string
	for _, m := range msgs {
		tokens = append(tokens, m.Token)
		if m.Title != "New comment on hello" || m.Body != "Ada: Nice post" || m.Proto != "HTTP/2.0" ||
			m.Data["id"] != "01900000-0000-7000-8000-000000000001" || m.Data["notifier"] != "comment.created" ||
			m.Data["key"] != "c-1" || m.Data["url"] != "https://app.acme.test/posts/hello" {
			t.Errorf("message = %+v", m)
		}
	}
	if !slices.Contains(tokens, phone) || !slices.Contains(tokens, tablet) {
		t.Errorf("tokens = %v, want the phone's and the tablet's", tokens)
	}
	if ok, failed := b.store.Outcomes(); len(ok) != 2 || !slices.Contains(ok, p) || !slices.Contains(ok, tb) || len(failed) != 0 {
		t.Errorf("outcomes = %v succeeded, %v failed", ok, failed)
	}
	if report.Provider != b.fcm.URL {
		t.Errorf("provider = %q, want %q", report.Provider, b.fcm.URL)
	}
	if n := b.fcm.Exchanges(); n != 1 {
		t.Errorf("%d token exchanges, want 1", n)
	}
}

func TestUnregisteredDeviceIsRemoved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	live, gone := b.fcm.Register(), b.fcm.Register()
	b.store.Add("u1", fcm.Platform, live, "com.acme.app")
	goneID := b.store.Add("u1", fcm.Platform, gone, "com.acme.app")
	b.fcm.Unregister(gone) // the app was uninstalled: 404 UNREGISTERED

	if err := b.sender.Send(context.Background(), message("u1", "x")); err != nil {
		t.Fatalf("Send = %v, want sent (one device took it)", err)
	}
	if ids := b.store.IDs(); slices.Contains(ids, goneID) || len(ids) != 1 {
		t.Errorf("devices left = %v, want the unregistered one removed", ids)
	}

	// A recipient whose only device is gone: refused, and the device removed.
	only := b.fcm.Register()
	onlyID := b.store.Add("u2", fcm.Platform, only, "com.acme.app")
	b.fcm.Answer(only, mobilepushtest.Answer{Status: 404, Reason: "UNREGISTERED"})
	err := b.sender.Send(context.Background(), message("u2", "x"))
	if kind, _ := channels.Classify(err); err == nil || kind != channels.KindPermanent || !strings.Contains(err.Error(), "UNREGISTERED") {
		t.Errorf("Send = %v (%v), want refused naming UNREGISTERED", err, kind)
	}
	if slices.Contains(b.store.IDs(), onlyID) {
		t.Error("the unregistered device is still there")
	}
}

func TestClassifiesFCMErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name   string
		answer mobilepushtest.Answer
		kind   channels.Kind
		after  time.Duration
	}{
		{"429 with Retry-After", mobilepushtest.Answer{Status: 429, Reason: "QUOTA_EXCEEDED", RetryAfter: "30"}, channels.KindRateLimited, 30 * time.Second},
		{"503 with Retry-After", mobilepushtest.Answer{Status: 503, Reason: "UNAVAILABLE", RetryAfter: "7"}, channels.KindTemporary, 7 * time.Second},
		{"500", mobilepushtest.Answer{Status: 500, Reason: "INTERNAL"}, channels.KindTemporary, 0},
		{"INVALID_ARGUMENT", mobilepushtest.Answer{Status: 400, Reason: "INVALID_ARGUMENT"}, channels.KindPermanent, 0},
		{"SENDER_ID_MISMATCH", mobilepushtest.Answer{Status: 403, Reason: "SENDER_ID_MISMATCH"}, channels.KindPermanent, 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rid := fmt.Sprintf("r%d", i)
			tok := b.fcm.Register()
			id := b.store.Add(rid, fcm.Platform, tok, "com.acme.app")
			b.fcm.Answer(tok, tt.answer)
			err := b.sender.Send(context.Background(), message(rid, "x"))
			kind, after := channels.Classify(err)
			if err == nil || kind != tt.kind || after != tt.after {
				t.Errorf("Send = %v: %v after %s, want %v after %s", err, kind, after, tt.kind, tt.after)
			}
			if !slices.Contains(b.store.IDs(), id) {
				t.Error("the device was removed; only UNREGISTERED removes one")
			}
			if _, failed := b.store.Outcomes(); !slices.Contains(failed, id) {
				t.Error("the failure was not counted against the device")
			}
		})
	}
}

// A burst of sends makes one token exchange; a 401 (the token revoked)
// makes every send that met it wait for one more exchange, not one each.
func TestAccessTokenCachedAndRefreshedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, mobilepushtest.WithTokenLifetime(20*time.Minute))
	const n = 40
	for i := range n {
		b.store.Add(fmt.Sprintf("u%d", i), fcm.Platform, b.fcm.Register(), "com.acme.app")
	}
	burst := func() {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { errs[i] = b.sender.Send(context.Background(), message(fmt.Sprintf("u%d", i), "x")) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("send %d: %v (fcm refused: %v)", i, err, b.fcm.Failures())
			}
		}
	}
	burst()
	if got := b.fcm.Exchanges(); got != 1 {
		t.Fatalf("%d exchanges for %d concurrent sends, want 1", got, n)
	}
	b.fcm.RevokeTokens()
	burst()
	if got := b.fcm.Exchanges(); got != 2 {
		t.Fatalf("%d exchanges after the token was refused, want 2", got)
	}
	if b.sender.TokenExchanges() != 2 {
		t.Errorf("the sender counts %d exchanges", b.sender.TokenExchanges())
	}
	// Renewed shortly before it expires: at 14 minutes of 20 the token is
	// still used, at 16 a new one is exchanged.
	b.clock.advance(14 * time.Minute)
	burst()
	if got := b.fcm.Exchanges(); got != 2 {
		t.Fatalf("%d exchanges 14 minutes into a 20-minute token, want 2", got)
	}
	b.clock.advance(2 * time.Minute)
	burst()
	if got := b.fcm.Exchanges(); got != 3 {
		t.Fatalf("%d exchanges 16 minutes into a 20-minute token, want 3", got)
	}
	if f := b.fcm.Failures(); len(f) > 0 {
		t.Errorf("FCM refused: %v", f)
	}
	if got := b.fcm.Count(); got != 4*n {
		t.Errorf("FCM accepted %d messages, want %d", got, 4*n)
	}
}

func TestLongBodyIsCutToFit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.store.Add("u1", fcm.Platform, b.fcm.Register(), "com.acme.app")
	if err := b.sender.Send(context.Background(), message("u1", strings.Repeat("é", 5000))); err != nil {
		t.Fatalf("Send = %v (fcm refused: %v)", err, b.fcm.Failures())
	}
	m := b.fcm.Messages()[0]
	if !strings.HasSuffix(m.Body, "…") || len(m.Body) > fcm.MaxPayload || !strings.HasPrefix(m.Body, "Ada: éé") {
		t.Errorf("body of %d bytes: %.40q…", len(m.Body), m.Body)
	}
}

func TestNoDevicesIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	err := b.sender.Send(context.Background(), message("nobody", "x"))
	if kind, _ := channels.Classify(err); err == nil || kind != channels.KindPermanent || !strings.Contains(err.Error(), "no android devices") {
		t.Errorf("Send = %v, want refused: no android devices", err)
	}
}

func TestTokenExchangeFailureIsTemporary(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.store.Add("u1", fcm.Platform, b.fcm.Register(), "com.acme.app")
	// A key file of another service account: its assertion does not verify.
	other := mobilepushtest.NewFCM("acme-app")
	defer other.Close()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "other.json")
	if err := os.WriteFile(keyFile, other.ServiceAccountJSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, err := mobilepushtest.WriteCA(b.fcm.Server, dir)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, fmt.Sprintf(`channels:
  fcm: {service_account_file: %s, base_url: %s, token_url: %s, ca_file: %s}
notifiers:
  comment.created:
    channels:
      fcm: {title: "t"}
`, keyFile, b.fcm.URL, b.fcm.TokenURL(), ca), b.store, nil)
	err = s.Send(context.Background(), message("u1", "x"))
	if kind, _ := channels.Classify(err); err == nil || kind != channels.KindTemporary || !strings.Contains(err.Error(), "OAuth token exchange") {
		t.Errorf("Send = %v, want a temporary failure of the token exchange", err)
	}
	if b.fcm.Count() != 0 {
		t.Error("a message was sent without a token")
	}
}

func TestPreview(t *testing.T) {
	t.Parallel()
	b := setup(t)
	parts, err := b.sender.Preview("comment.created", map[string]any{"post": "p", "author": "A", "body": "b"}, channels.Recipient{})
	if err != nil || len(parts) != 3 || parts[0].Value != "New comment on p" || parts[1].Value != "A: b" ||
		parts[2].Value != "https://app.acme.test/posts/p" {
		t.Errorf("Preview = %+v, %v", parts, err)
	}
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	reg, err := channels.NewRegistry(fcm.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	notJSON := filepath.Join(dir, "key.json")
	if err := os.WriteFile(notJSON, []byte(`{"type": "authorized_user"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := `channels:
  fcm:
    service_account_file: ` + notJSON + `
    project_id: "Not A Project"
    base_url: ftp://x
    ca_file: /nonexistent/ca.pem
    timeout: 0s
notifiers:
  n:
    channels:
      fcm: {body: "{{.x"}
`
	_, err = config.ParseWith("test.yaml", []byte(bad), reg.Check)
	if err == nil {
		t.Fatal("a bad fcm section loaded")
	}
	for _, want := range []string{
		`test.yaml:3: channels.fcm.service_account_file: the key file's type is "authorized_user", want service_account`,
		`test.yaml:4: channels.fcm.project_id: want a Firebase project id`,
		`test.yaml:5: channels.fcm.base_url:`,
		`test.yaml:6: channels.fcm.ca_file: read CA file:`,
		`test.yaml:7: channels.fcm.timeout:`,
		`test.yaml:11: notifiers.n.channels.fcm.title: must be set`,
		`test.yaml:11: notifiers.n.channels.fcm.body: invalid template`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors do not contain %q:\n%v", want, err)
		}
	}
	missing := "channels:\n  fcm: {project_id: acme-app}\n"
	if _, err := config.ParseWith("test.yaml", []byte(missing), reg.Check); err == nil ||
		!strings.Contains(err.Error(), "test.yaml:2: channels.fcm.service_account_file: must be set") {
		t.Errorf("without a key file: %v", err)
	}
	// Without a section, the channel is not configured: its deliveries are
	// unavailable, and the notifier's templates are still checked.
	cfg, err := config.ParseWith("test.yaml", []byte("notifiers:\n  n:\n    channels:\n      fcm: {title: t}\n"), reg.Check)
	if err != nil {
		t.Fatal(err)
	}
	set, err := reg.Open(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if _, ok := set.Channels[fcm.Name]; ok {
		t.Error("fcm is configured without a section")
	}
}

func TestCheckDevice(t *testing.T) {
	t.Parallel()
	f := mobilepushtest.NewFCM("acme-app")
	defer f.Close()
	for _, tok := range []string{f.Register(), "fGx3:APA91bH-_x" + strings.Repeat("a", 140)} {
		if err := fcm.CheckToken(tok); err != nil {
			t.Errorf("CheckToken(%q) = %v", tok, err)
		}
	}
	for _, tok := range []string{"", "short", strings.Repeat("a", 1025), "has space" + strings.Repeat("a", 30),
		"slash/" + strings.Repeat("a", 30), "nul\x00" + strings.Repeat("a", 30)} {
		if fcm.CheckToken(tok) == nil {
			t.Errorf("CheckToken(%q) accepted", tok)
		}
	}
	for _, app := range []string{"com.acme.app", "com.acme.app_2", "io.x.Y"} {
		if err := fcm.CheckApp(app); err != nil {
			t.Errorf("CheckApp(%q) = %v", app, err)
		}
	}
	for _, app := range []string{"", "acme", "com.1acme", "com..acme", "com.acme-app", "com.acme.", strings.Repeat("a.", 128) + "b"} {
		if fcm.CheckApp(app) == nil {
			t.Errorf("CheckApp(%q) accepted", app)
		}
	}
}
