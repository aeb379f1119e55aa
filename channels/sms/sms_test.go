package sms_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/sms"
	"github.com/notifyd/notifyd/config"
)

const (
	sid   = "AC0123456789abcdef0123456789abcdef"
	token = "tok3n"
)

// twilio is a local server speaking the part of Twilio's Messages API the
// channel uses. It checks the request as Twilio would and answers what the
// test queued (201 with a Message resource by default).
type twilio struct {
	*httptest.Server
	mu       sync.Mutex
	received []map[string]string
	answers  []answer
}

type answer struct {
	status int
	header map[string]string
	body   any
}

func startTwilio(t *testing.T) *twilio {
	t.Helper()
	tw := &twilio{}
	tw.Server = httptest.NewServer(http.HandlerFunc(tw.serve))
	t.Cleanup(tw.Close)
	return tw
}

func (tw *twilio) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	user, pass, ok := r.BasicAuth()
	if r.Method != http.MethodPost || r.URL.Path != "/2010-04-01/Accounts/"+sid+"/Messages.json" {
		w.WriteHeader(404)
		_ = json.NewEncoder(w).Encode(map[string]any{"code": 20404, "message": "not found " + r.URL.Path, "status": 404})
		return
	}
	if !ok || user != sid || pass != token {
		w.WriteHeader(401)
		_ = json.NewEncoder(w).Encode(map[string]any{"code": 20003, "message": "Authenticate", "status": 401})
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
		w.WriteHeader(400)
		return
	}
	if err := r.ParseForm(); err != nil {
		w.WriteHeader(400)
		return
	}
	got := map[string]string{"To": r.PostForm.Get("To"), "From": r.PostForm.Get("From"), "Body": r.PostForm.Get("Body")}
	tw.mu.Lock()
	tw.received = append(tw.received, got)
	var a answer
	if len(tw.answers) > 0 {
		a, tw.answers = tw.answers[0], tw.answers[1:]
	}
	tw.mu.Unlock()
	if a.status == 0 {
		segs, _ := sms.Segments(got["Body"])
		a = answer{status: 201, body: map[string]any{"sid": "SM123", "status": "queued", "to": got["To"],
			"num_segments": itoa(segs)}} // Twilio sends it as a string
	}
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(a.status)
	_ = json.NewEncoder(w).Encode(a.body)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func (tw *twilio) queue(a answer) {
	tw.mu.Lock()
	tw.answers = append(tw.answers, a)
	tw.mu.Unlock()
}

func (tw *twilio) messages() []map[string]string {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return append([]map[string]string(nil), tw.received...)
}

func newSender(t *testing.T, tw *twilio, mod func(*sms.Config)) *sms.Sender {
	t.Helper()
	cfg := &sms.Config{AccountSID: sid, AuthToken: token, From: "+15005550006", BaseURL: tw.URL,
		MaxSegments: 3, Timeout: config.Duration(5 * time.Second)}
	if mod != nil {
		mod(cfg)
	}
	s, err := sms.New(cfg, map[string]*sms.Templates{
		"comment.created": {Text: "{{.author}} commented: {{.body}}"},
	}, sms.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func message(body string) channels.Message {
	return channels.Message{DeliveryID: "d-1", Notifier: "comment.created",
		Recipient: &channels.Recipient{ID: "u1", Phone: "+14155550123"},
		Params:    map[string]any{"author": "Ada", "body": body}}
}

func send(s *sms.Sender, m channels.Message) (string, error) {
	ctx, rep := channels.WithReport(context.Background())
	err := s.Send(ctx, m)
	return rep.Provider, err
}

func TestSendPostsTheMessage(t *testing.T) {
	t.Parallel()
	tw := startTwilio(t)
	s := newSender(t, tw, nil)
	provider, err := send(s, message("nice post"))
	if err != nil {
		t.Fatal(err)
	}
	got := tw.messages()
	if len(got) != 1 {
		t.Fatalf("twilio got %d messages", len(got))
	}
	want := map[string]string{"To": "+14155550123", "From": "+15005550006", "Body": "Ada commented: nice post"}
	for k, v := range want {
		if got[0][k] != v {
			t.Errorf("%s = %q, want %q", k, got[0][k], v)
		}
	}
	if provider != "twilio (1 segment)" {
		t.Errorf("provider = %q", provider)
	}

	// A two-part message records its segments; Twilio's count wins.
	provider, err = send(s, message(strings.Repeat("x", 200)))
	if err != nil {
		t.Fatal(err)
	}
	if provider != "twilio (2 segments)" {
		t.Errorf("provider = %q, want 2 segments", provider)
	}
	tw.queue(answer{status: 201, body: map[string]any{"sid": "SM9", "num_segments": "3"}})
	if provider, _ = send(s, message("short")); provider != "twilio (3 segments)" {
		t.Errorf("provider = %q, want Twilio's 3 segments", provider)
	}
}

func TestSendClassifiesTwilioErrors(t *testing.T) {
	t.Parallel()
	tw := startTwilio(t)
	s := newSender(t, tw, nil)
	for _, tc := range []struct {
		name  string
		a     answer
		kind  channels.Kind
		after time.Duration
		text  string
	}{
		{"invalid number", answer{status: 400, body: map[string]any{"code": 21211, "message": "The 'To' number is not a valid phone number.", "status": 400}},
			channels.KindPermanent, 0, "error 21211"},
		{"not mobile", answer{status: 400, body: map[string]any{"code": 21614, "message": "not a mobile number", "status": 400}},
			channels.KindPermanent, 0, "21614"},
		{"other 400", answer{status: 400, body: map[string]any{"code": 21602, "message": "Message body is required.", "status": 400}},
			channels.KindPermanent, 0, "21602"},
		{"rate limited", answer{status: 429, header: map[string]string{"Retry-After": "7"}, body: map[string]any{"code": 20429, "message": "Too Many Requests"}},
			channels.KindRateLimited, 7 * time.Second, "429"},
		{"server error", answer{status: 503, body: map[string]any{"code": 20500, "message": "unavailable"}},
			channels.KindTemporary, 0, "HTTP 503"},
		{"credentials", answer{status: 401, body: map[string]any{"code": 20003, "message": "Authenticate"}},
			channels.KindTemporary, 0, "check channels.sms.account_sid and auth_token"},
	} {
		tw.queue(tc.a)
		_, err := send(s, message("hi"))
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		kind, after := channels.Classify(err)
		if kind != tc.kind || after != tc.after {
			t.Errorf("%s: kind %v after %v, want %v after %v (%v)", tc.name, kind, after, tc.kind, tc.after, err)
		}
		if !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: error %q lacks %q", tc.name, err, tc.text)
		}
	}

	// A number that replied STOP is refused and suppressed, so no later
	// message goes to it.
	tw.queue(answer{status: 400, body: map[string]any{"code": 21610, "message": "Attempt to send to unsubscribed recipient", "status": 400}})
	msg := message("hi")
	_, err := send(s, msg)
	se, ok := channels.SuppressionOf(err)
	if kind, _ := channels.Classify(err); kind != channels.KindPermanent || !ok || se.Address != msg.Recipient.Phone ||
		!strings.Contains(se.Reason, "STOP") {
		t.Errorf("21610: kind %v, suppression %+v (%v); want permanent, suppressing %s", kind, se, err, msg.Recipient.Phone)
	}

	// Real credentials that Twilio refuses: the test server checks them.
	bad := newSender(t, tw, func(c *sms.Config) { c.AuthToken = "wrong" })
	if _, err := send(bad, message("hi")); err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("wrong token: %v", err)
	}
	// Unreachable server: temporary.
	down := newSender(t, tw, func(c *sms.Config) { c.BaseURL = "http://127.0.0.1:1" })
	if _, err := send(down, message("hi")); err == nil {
		t.Error("unreachable server: no error")
	} else if k, _ := channels.Classify(err); k != channels.KindTemporary {
		t.Errorf("unreachable server: kind %v", k)
	}
}

func TestSendRefusesTooLongAndBadPhone(t *testing.T) {
	t.Parallel()
	tw := startTwilio(t)
	s := newSender(t, tw, nil) // at most 3 segments
	_, err := send(s, message(strings.Repeat("é€", 200)))
	if k, _ := channels.Classify(err); err == nil || k != channels.KindPermanent || !strings.Contains(err.Error(), "max_segments") {
		t.Errorf("too long: %v", err)
	}
	m := message("hi")
	m.Recipient.Phone = "0123"
	if _, err := send(s, m); err == nil {
		t.Error("bad phone sent")
	} else if k, _ := channels.Classify(err); k != channels.KindPermanent {
		t.Errorf("bad phone: kind %v", k)
	}
	if n := len(tw.messages()); n != 0 {
		t.Errorf("twilio got %d messages, want none", n)
	}
	if err := s.Addressable("comment.created", channels.Recipient{ID: "x", Phone: "+33612345678"}); err != nil {
		t.Errorf("addressable: %v", err)
	}
	if err := s.Addressable("other", channels.Recipient{ID: "x", Phone: "+33612345678"}); err == nil {
		t.Error("a notifier without an sms template is addressable")
	}
}

func TestPreview(t *testing.T) {
	t.Parallel()
	s := newSender(t, startTwilio(t), nil)
	parts, err := s.Preview("comment.created", map[string]any{"author": "Zoë", "body": "👍"}, channels.Recipient{})
	if err != nil {
		t.Fatal(err)
	}
	if parts[0].Value != "Zoë commented: 👍" || parts[1].Value != "1 (UCS-2)" {
		t.Errorf("preview = %+v", parts)
	}
}

func TestSegments(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		text string
		segs int
		enc  sms.Encoding
	}{
		{"empty", "", 1, sms.GSM7},
		{"160 gsm", strings.Repeat("a", 160), 1, sms.GSM7},
		{"161 gsm", strings.Repeat("a", 161), 2, sms.GSM7},
		{"306 gsm", strings.Repeat("a", 306), 2, sms.GSM7},
		{"307 gsm", strings.Repeat("a", 307), 3, sms.GSM7},
		{"extension counts twice", strings.Repeat("€", 80), 1, sms.GSM7},
		{"extension over", strings.Repeat("€", 81), 2, sms.GSM7},
		// 152 septets then a two-septet character: it does not split.
		{"escape not split", strings.Repeat("a", 152) + "€" + strings.Repeat("a", 10), 2, sms.GSM7},
		{"gsm accents", "Ça a été où? ñ ü ß Δ", 1, sms.GSM7},
		{"70 ucs2", strings.Repeat("ж", 70), 1, sms.UCS2},
		{"71 ucs2", strings.Repeat("ж", 71), 2, sms.UCS2},
		{"134 ucs2", strings.Repeat("ж", 134), 2, sms.UCS2},
		{"135 ucs2", strings.Repeat("ж", 135), 3, sms.UCS2},
		{"emoji is two units", strings.Repeat("😀", 35), 1, sms.UCS2},
		{"emoji over", strings.Repeat("😀", 36), 2, sms.UCS2},
		// 66 units then a surrogate pair: the pair goes to the next part.
		{"pair not split", strings.Repeat("ж", 66) + "😀" + strings.Repeat("ж", 10), 2, sms.UCS2},
	} {
		segs, enc := sms.Segments(tc.text)
		if segs != tc.segs || enc != tc.enc {
			t.Errorf("%s: %d %s, want %d %s", tc.name, segs, enc, tc.segs, tc.enc)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	reg, err := channels.NewRegistry(sms.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	good := `channels:
  sms: {account_sid: ` + sid + `, auth_token: t, from: "+15005550006"}
notifiers:
  n:
    example: {who: Ada}
    channels:
      sms: {text: "Hi {{.who}}"}
`
	c, err := config.ParseWith("test.yaml", []byte(good), reg.Check)
	if err != nil {
		t.Fatal(err)
	}
	set, err := reg.Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if _, ok := set.Channels[sms.Name]; !ok {
		t.Fatal("sms is not configured")
	}

	bad := `channels:
  sms:
    account_sid: nope
    auth_token: t
    from: "+1 415"
    base_url: ftp://x
    max_segments: 0
    allowed_countries: ["44", "0", "+1", "1234"]
    rate: -1
    max_per_recipient_per_day: -1
notifiers:
  n:
    example: {who: Ada}
    channels:
      sms: {text: "{{.who"}
  m:
    channels:
      sms: {}
`
	_, err = config.ParseWith("test.yaml", []byte(bad), reg.Check)
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{
		"test.yaml:3: channels.sms.account_sid: want a Twilio account SID",
		"test.yaml:5: channels.sms.from: want an E.164 number",
		"test.yaml:6: channels.sms.base_url:",
		"test.yaml:7: channels.sms.max_segments: must be at least 1",
		"test.yaml:15: notifiers.n.channels.sms.text:",
		"notifiers.m.channels.sms.text: must be set",
		"channels.sms.allowed_countries[1]: want an E.164 country calling code",
		"channels.sms.allowed_countries[2]: want an E.164 country calling code",
		"channels.sms.allowed_countries[3]: want an E.164 country calling code",
		"test.yaml:9: channels.sms.rate: must not be negative",
		"test.yaml:10: channels.sms.max_per_recipient_per_day: must not be negative",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}

	if strings.Contains(err.Error(), "allowed_countries[0]") {
		t.Errorf("country code 44 refused: %v", err)
	}
	// base_url carries the auth token: https, or http on loopback only.
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"https://api.twilio.com", true},
		{"http://127.0.0.1:8080", true},
		{"http://[::1]:8080", true},
		{"http://localhost:8080", true},
		{"http://api.twilio.com", false},
		{"http://10.0.0.5", false},
	} {
		y := "channels:\n  sms: {account_sid: " + sid + ", auth_token: t, from: Acme, base_url: \"" + tc.url + "\"}\n"
		_, err := config.ParseWith("test.yaml", []byte(y), reg.Check)
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "channels.sms.base_url: must be an https URL")) {
			t.Errorf("base_url %s: %v, want ok %v", tc.url, err, tc.ok)
		}
	}

	long := `channels:
  sms: {account_sid: ` + sid + `, auth_token: t, from: Acme, max_segments: 1}
notifiers:
  n:
    example: {who: Ada}
    channels:
      sms: {text: "{{.who}} ` + strings.Repeat("x", 170) + `"}
`
	if _, err := config.ParseWith("test.yaml", []byte(long), reg.Check); err == nil ||
		!strings.Contains(err.Error(), "renders the example params as 2 GSM-7 segments") {
		t.Errorf("too long example: %v", err)
	}
}

// channels.sms.allowed_countries: a phone in another country is not
// addressable and a send to it is refused without calling Twilio;
// channels.sms.rate: over it a send is rate-limited, not sent.
func TestCountryAllowlistAndRate(t *testing.T) {
	t.Parallel()
	tw := startTwilio(t)
	s := newSender(t, tw, func(c *sms.Config) { c.AllowedCountries = []string{"1", "44"}; c.Rate = 1 })
	for _, tc := range []struct {
		phone string
		ok    bool
	}{
		{"+14155550123", true},
		{"+447700900123", true},
		{"+88213000000", false}, // international networks: premium-rate fraud
		{"+33612345678", false},
	} {
		err := s.Addressable("comment.created", channels.Recipient{ID: "u1", Phone: tc.phone})
		if (err == nil) != tc.ok {
			t.Errorf("Addressable(%s) = %v, want ok %v", tc.phone, err, tc.ok)
		}
		if tc.ok {
			continue
		}
		m := message("hi")
		m.Recipient.Phone = tc.phone
		_, err = send(s, m)
		if k, _ := channels.Classify(err); err == nil || k != channels.KindPermanent || !strings.Contains(err.Error(), "allowed_countries") {
			t.Errorf("send to %s: %v, want refused for allowed_countries", tc.phone, err)
		}
	}
	if n := len(tw.messages()); n != 0 {
		t.Fatalf("Twilio got %d messages for refused countries", n)
	}
	if _, err := send(s, message("one")); err != nil {
		t.Fatal(err)
	}
	_, err := send(s, message("two"))
	if k, after := channels.Classify(err); k != channels.KindRateLimited || after <= 0 || !strings.Contains(err.Error(), "channels.sms.rate") {
		t.Fatalf("second text within a second at rate 1: %v (%v, %v), want rate limited", err, k, after)
	}
	if n := len(tw.messages()); n != 1 {
		t.Fatalf("Twilio got %d messages, want 1", n)
	}
	if limit, per := s.RecipientCap(); limit != 0 || per != 24*time.Hour {
		t.Fatalf("RecipientCap = %d per %s, want the Config's 0 per 24h", limit, per)
	}
}
