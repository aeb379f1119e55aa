package apns_test

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
	"github.com/notifyd/notifyd/channels/apns"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/mobilepushtest"
)

const (
	teamID = "TEAM123456"
	keyID  = "KEY0000001"
	bundle = "com.acme.app"
)

// clock is a test clock that starts now and moves when told.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

type fixture struct {
	apns   *mobilepushtest.APNs
	store  *mobilepushtest.Devices
	sender *apns.Sender
	clock  *clock
}

// setup starts a local APNs (HTTP/2 over TLS) and opens the channel on it
// through the registry, as the daemon does: the .p8 key and the CA file on
// disk, the section in YAML.
func setup(t *testing.T, extra string) fixture {
	t.Helper()
	c := &clock{}
	a := mobilepushtest.NewAPNs(teamID, keyID, mobilepushtest.WithAPNsClock(c.now))
	t.Cleanup(a.Close)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "AuthKey_"+keyID+".p8")
	if err := os.WriteFile(keyFile, a.KeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, err := mobilepushtest.WriteCA(a.Server, dir)
	if err != nil {
		t.Fatal(err)
	}
	store := &mobilepushtest.Devices{}
	s := open(t, fmt.Sprintf(`channels:
  apns:
    key_id: %s
    team_id: %s
    private_key_file: %s
    base_url: %s
    ca_file: %s
    timeout: 5s
%snotifiers:
  comment.created:
    channels:
      apns: {title: "New comment on {{.post}}", body: "{{.author}}: {{.body}}", url: "https://app.acme.test/posts/{{.post}}"}
`, keyID, teamID, keyFile, a.URL, ca, extra), store, c.now)
	return fixture{apns: a, store: store, sender: s, clock: c}
}

func open(t *testing.T, yaml string, store channels.Devices, now func() time.Time) *apns.Sender {
	t.Helper()
	reg, err := channels.NewRegistry(apns.Plugin)
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
	v, ok := set.Opened(apns.Name)
	if !ok {
		t.Fatal("apns is not configured")
	}
	return v.(*apns.Sender)
}

func message(rid, key, body string) channels.Message {
	return channels.Message{DeliveryID: "01900000-0000-7000-8000-000000000001", NotificationID: "n-1",
		Notifier: "comment.created", Key: key, Recipient: &channels.Recipient{ID: rid},
		Params: map[string]any{"post": "hello", "author": "Ada", "body": body}}
}

func TestSendsToEachIOSDevice(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	phone, watchApp := f.apns.Register(bundle), f.apns.Register("com.acme.other")
	p := f.store.Add("u1", apns.Platform, phone, bundle)
	w := f.store.Add("u1", apns.Platform, watchApp, "com.acme.other")
	f.store.Add("u1", "android", "fcm-token-that-is-long-enough", "com.acme.app") // not this channel's

	ctx, report := channels.WithReport(context.Background())
	if err := f.sender.Send(ctx, message("u1", "c-1", "Nice post")); err != nil {
		t.Fatalf("Send = %v (apns refused: %v)", err, f.apns.Failures())
	}
	msgs := f.apns.Messages()
	if len(msgs) != 2 {
		t.Fatalf("APNs got %d pushes, want one per iOS device of u1", len(msgs))
	}
	topics := map[string]string{}
	for _, m := range msgs {
		topics[m.Token] = m.Topic
		if m.Title() != "New comment on hello" || m.Body() != "Ada: Nice post" || m.Proto != "HTTP/2.0" ||
			m.PushType != "alert" || m.CollapseID != "c-1" || m.APNSID != "01900000-0000-7000-8000-000000000001" ||
			m.Payload["id"] != "01900000-0000-7000-8000-000000000001" || m.Payload["notifier"] != "comment.created" ||
			m.Payload["key"] != "c-1" || m.Payload["url"] != "https://app.acme.test/posts/hello" {
			t.Errorf("push = %+v", m)
		}
	}
	if topics[phone] != bundle || topics[watchApp] != "com.acme.other" {
		t.Errorf("topics = %v, want each device's app", topics)
	}
	if ok, failed := f.store.Outcomes(); len(ok) != 2 || !slices.Contains(ok, p) || !slices.Contains(ok, w) || len(failed) != 0 {
		t.Errorf("outcomes = %v succeeded, %v failed", ok, failed)
	}
	if report.Provider != f.apns.URL {
		t.Errorf("provider = %q, want %q", report.Provider, f.apns.URL)
	}
}

func TestGoneDevicesAreRemoved(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	live := f.apns.Register(bundle)
	unregistered := f.apns.Register(bundle)
	f.store.Add("u1", apns.Platform, live, bundle)
	u := f.store.Add("u1", apns.Platform, unregistered, bundle)
	bad := f.store.Add("u1", apns.Platform, strings.Repeat("0f", 32), bundle) // a token APNs never issued
	f.apns.Answer(unregistered, mobilepushtest.Answer{Status: 410, Reason: "Unregistered"})

	if err := f.sender.Send(context.Background(), message("u1", "c-1", "x")); err != nil {
		t.Fatalf("Send = %v, want sent (one device took it)", err)
	}
	if ids := f.store.IDs(); slices.Contains(ids, u) || slices.Contains(ids, bad) || len(ids) != 1 {
		t.Errorf("devices left = %v, want the 410 and the BadDeviceToken ones removed", ids)
	}
	// A recipient whose only device is gone: refused.
	only := f.apns.Register(bundle)
	f.store.Add("u2", apns.Platform, only, bundle)
	f.apns.Answer(only, mobilepushtest.Answer{Status: 400, Reason: "BadDeviceToken"})
	err := f.sender.Send(context.Background(), message("u2", "c-1", "x"))
	if kind, _ := channels.Classify(err); err == nil || kind != channels.KindPermanent || !strings.Contains(err.Error(), "BadDeviceToken") {
		t.Errorf("Send = %v (%v), want refused naming BadDeviceToken", err, kind)
	}
}

func TestClassifiesAPNsErrors(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	tests := []struct {
		name   string
		answer mobilepushtest.Answer
		kind   channels.Kind
		after  time.Duration
	}{
		{"429 with Retry-After", mobilepushtest.Answer{Status: 429, Reason: "TooManyRequests", RetryAfter: "20"}, channels.KindRateLimited, 20 * time.Second},
		{"429 without", mobilepushtest.Answer{Status: 429, Reason: "TooManyRequests"}, channels.KindRateLimited, 0},
		{"500", mobilepushtest.Answer{Status: 500, Reason: "InternalServerError"}, channels.KindTemporary, 0},
		{"503", mobilepushtest.Answer{Status: 503, Reason: "ServiceUnavailable", RetryAfter: "5"}, channels.KindTemporary, 5 * time.Second},
		{"DeviceTokenNotForTopic", mobilepushtest.Answer{Status: 400, Reason: "DeviceTokenNotForTopic"}, channels.KindPermanent, 0},
		{"PayloadTooLarge", mobilepushtest.Answer{Status: 413, Reason: "PayloadTooLarge"}, channels.KindPermanent, 0},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rid := fmt.Sprintf("r%d", i)
			tok := f.apns.Register(bundle)
			id := f.store.Add(rid, apns.Platform, tok, bundle)
			f.apns.Answer(tok, tt.answer)
			err := f.sender.Send(context.Background(), message(rid, "c-1", "x"))
			kind, after := channels.Classify(err)
			if err == nil || kind != tt.kind || after != tt.after || !strings.Contains(err.Error(), tt.answer.Reason) {
				t.Errorf("Send = %v: %v after %s, want %v after %s naming %s", err, kind, after, tt.kind, tt.after, tt.answer.Reason)
			}
			if !slices.Contains(f.store.IDs(), id) {
				t.Error("the device was removed; only 410 and BadDeviceToken remove one")
			}
		})
	}
}

// One provider token serves every push until it is 50 minutes old, however
// many pushes run at once; then one new token is signed. APNs's
// ExpiredProviderToken makes the sender sign a new one and try again.
func TestProviderTokenSharedAndRefreshed(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	const n = 30
	for i := range n {
		f.store.Add(fmt.Sprintf("u%d", i), apns.Platform, f.apns.Register(bundle), bundle)
	}
	burst := func() {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() { errs[i] = f.sender.Send(context.Background(), message(fmt.Sprintf("u%d", i), "c-1", "x")) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("push %d: %v (apns refused: %v)", i, err, f.apns.Failures())
			}
		}
	}
	burst()
	if got := f.sender.TokensSigned(); got != 1 || f.apns.ProviderTokens() != 1 {
		t.Fatalf("%d tokens signed, %d seen by APNs, for %d concurrent pushes; want 1", got, f.apns.ProviderTokens(), n)
	}
	f.clock.advance(49 * time.Minute)
	burst()
	if got := f.sender.TokensSigned(); got != 1 {
		t.Fatalf("%d tokens signed at 49 minutes, want 1", got)
	}
	f.clock.advance(2 * time.Minute)
	burst()
	if got := f.sender.TokensSigned(); got != 2 || f.apns.ProviderTokens() != 2 {
		t.Fatalf("%d tokens signed, %d seen, at 51 minutes; want 2", got, f.apns.ProviderTokens())
	}
	if got := f.apns.Count(); got != 3*n {
		t.Errorf("APNs accepted %d pushes, want %d", got, 3*n)
	}
}

func TestExpiredProviderTokenIsRenewed(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	tok := f.apns.Register(bundle)
	f.store.Add("u1", apns.Platform, tok, bundle)
	f.apns.Answer(tok, mobilepushtest.Answer{Status: 403, Reason: "ExpiredProviderToken"})
	if err := f.sender.Send(context.Background(), message("u1", "c-1", "x")); err != nil {
		t.Fatalf("Send = %v, want sent on a new token", err)
	}
	if got := f.sender.TokensSigned(); got != 2 {
		t.Errorf("%d tokens signed, want 2 (the first expired)", got)
	}
}

func TestCollapseIDOfALongKey(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	f.store.Add("u1", apns.Platform, f.apns.Register(bundle), bundle)
	key := strings.Repeat("k", 65)
	if err := f.sender.Send(context.Background(), message("u1", key, "x")); err != nil {
		t.Fatalf("Send = %v (apns refused: %v)", err, f.apns.Failures())
	}
	m := f.apns.Messages()[0]
	if m.CollapseID != apns.CollapseID(key) || len(m.CollapseID) != 64 || m.Payload["key"] != key {
		t.Errorf("collapse id %q for a 65-byte key, payload key %v", m.CollapseID, m.Payload["key"])
	}
	if apns.CollapseID(key) == apns.CollapseID(strings.Repeat("k", 66)) || apns.CollapseID("short") != "short" {
		t.Error("CollapseID does not keep short keys or tell long ones apart")
	}
}

func TestLongBodyIsCutToFit(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	f.store.Add("u1", apns.Platform, f.apns.Register(bundle), bundle)
	if err := f.sender.Send(context.Background(), message("u1", "c-1", strings.Repeat("日本", 2000))); err != nil {
		t.Fatalf("Send = %v (apns refused: %v)", err, f.apns.Failures())
	}
	if b := f.apns.Messages()[0].Body(); !strings.HasSuffix(b, "…") || !strings.HasPrefix(b, "Ada: 日本") {
		t.Errorf("body %.40q…", b)
	}
}

func TestDefaultTopic(t *testing.T) {
	t.Parallel()
	f := setup(t, "    topic: com.acme.app\n")
	tok := f.apns.Register(bundle)
	f.store.Add("u1", apns.Platform, tok, "") // a device stored without its app
	if err := f.sender.Send(context.Background(), message("u1", "c-1", "x")); err != nil {
		t.Fatalf("Send = %v (apns refused: %v)", err, f.apns.Failures())
	}
	if m := f.apns.Messages()[0]; m.Topic != bundle {
		t.Errorf("topic = %q, want the configured default", m.Topic)
	}
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	reg, err := channels.NewRegistry(apns.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rsaKey := filepath.Join(dir, "rsa.p8")
	other := mobilepushtest.NewFCM("acme-app") // its service account's key is RSA
	defer other.Close()
	if err := os.WriteFile(rsaKey, other.ServiceAccountJSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := `channels:
  apns:
    key_id: abc
    team_id: TEAM123456
    private_key_file: ` + rsaKey + `
    topic: "not a bundle"
    base_url: "::"
notifiers:
  n:
    channels:
      apns: {title: "{{.x"}
`
	_, err = config.ParseWith("test.yaml", []byte(bad), reg.Check)
	if err == nil {
		t.Fatal("a bad apns section loaded")
	}
	for _, want := range []string{
		`test.yaml:3: channels.apns.key_id: want the signing key's id`,
		`test.yaml:5: channels.apns.private_key_file: the key file is not PEM`,
		`test.yaml:6: channels.apns.topic: want an iOS bundle id`,
		`test.yaml:7: channels.apns.base_url:`,
		`test.yaml:11: notifiers.n.channels.apns.title: invalid template`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors do not contain %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "team_id") {
		t.Errorf("a good team_id reported: %v", err)
	}
	missing := "channels:\n  apns: {key_id: KEY0000001, team_id: TEAM123456}\n"
	if _, err := config.ParseWith("test.yaml", []byte(missing), reg.Check); err == nil ||
		!strings.Contains(err.Error(), "test.yaml:2: channels.apns.private_key_file: must be set") {
		t.Errorf("without a key file: %v", err)
	}
}

func TestCheckDevice(t *testing.T) {
	t.Parallel()
	for _, tok := range []string{strings.Repeat("ab", 32), strings.Repeat("AB", 32), strings.Repeat("0f", 100)} {
		if err := apns.CheckToken(tok); err != nil {
			t.Errorf("CheckToken(%q) = %v", tok, err)
		}
	}
	for _, tok := range []string{"", strings.Repeat("ab", 31), strings.Repeat("ab", 101), strings.Repeat("a", 65),
		strings.Repeat("zz", 32), "<" + strings.Repeat("ab", 32) + ">"} {
		if apns.CheckToken(tok) == nil {
			t.Errorf("CheckToken(%q) accepted", tok)
		}
	}
	for _, app := range []string{"com.acme.app", "com.acme.my-app", "io.x.Y2"} {
		if err := apns.CheckApp(app); err != nil {
			t.Errorf("CheckApp(%q) = %v", app, err)
		}
	}
	for _, app := range []string{"", "acme", "com..acme", "com.acme_app", "com.acme.", "com acme", strings.Repeat("a.", 78) + "b"} {
		if apns.CheckApp(app) == nil {
			t.Errorf("CheckApp(%q) accepted", app)
		}
	}
}
