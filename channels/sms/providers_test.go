package sms_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/sms"
	"github.com/notifyd/notifyd/config"
)

const vonageApp = "aaaaaaaa-bbbb-4ccc-8ddd-0123456789ab"

var (
	vonageKeyOnce sync.Once
	vonageKey     *rsa.PrivateKey
	vonagePEM     string
)

// testKey is the Vonage application's key pair, made once per test binary.
func testKey(t testing.TB) (*rsa.PrivateKey, string) {
	t.Helper()
	vonageKeyOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		der, _ := x509.MarshalPKCS8PrivateKey(k)
		vonageKey, vonagePEM = k, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	})
	return vonageKey, vonagePEM
}

// vonage is a local server speaking Vonage's Messages API: it checks the
// path, the JWT (RS256 over the application's key, application_id, iat,
// exp, jti) and the body's fields as Vonage does, and answers 202 with a
// message_uuid, or the answer the test queued. hang makes it take requests
// and never answer.
type vonage struct {
	*httptest.Server
	pub      *rsa.PublicKey
	hang     chan struct{}
	count    atomic.Int64
	mu       sync.Mutex
	received []map[string]string
	answers  []answer
	problems []string
}

func startVonage(t testing.TB, hang bool) *vonage {
	t.Helper()
	k, _ := testKey(t)
	v := &vonage{pub: &k.PublicKey}
	if hang {
		v.hang = make(chan struct{})
	}
	v.Server = httptest.NewServer(http.HandlerFunc(v.serve))
	t.Cleanup(func() {
		if v.hang != nil {
			close(v.hang)
		}
		v.Close()
	})
	return v
}

// checkJWT returns what is wrong with a request's bearer token.
func (v *vonage) checkJWT(auth string) string {
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	parts := strings.Split(tok, ".")
	if !ok || len(parts) != 3 {
		return "no bearer JWT"
	}
	enc := base64.RawURLEncoding
	h, _ := enc.DecodeString(parts[0])
	var head struct{ Alg, Typ string }
	if json.Unmarshal(h, &head) != nil || head.Alg != "RS256" {
		return "JWT header " + string(h)
	}
	sig, _ := enc.DecodeString(parts[2])
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(v.pub, crypto.SHA256, sum[:], sig) != nil {
		return "JWT signature does not verify"
	}
	c, _ := enc.DecodeString(parts[1])
	var claims struct {
		App string `json:"application_id"`
		Iat int64  `json:"iat"`
		Exp int64  `json:"exp"`
		Jti string `json:"jti"`
	}
	now := time.Now().Unix()
	if json.Unmarshal(c, &claims) != nil || claims.App != vonageApp || claims.Jti == "" ||
		claims.Iat > now+5 || claims.Exp < now {
		return "JWT claims " + string(c)
	}
	return ""
}

func (v *vonage) serve(w http.ResponseWriter, r *http.Request) {
	v.count.Add(1)
	if v.hang != nil {
		select {
		case <-v.hang:
		case <-r.Context().Done():
		}
		return
	}
	problem := func(status int, title, detail string) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "https://developer.vonage.com/api-errors/messages#1150",
			"title": title, "detail": detail, "instance": "bf0ca0bf927b3b52e3cb03217e1a1ddf"})
	}
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		problem(404, "Not Found", r.URL.Path)
		return
	}
	if p := v.checkJWT(r.Header.Get("Authorization")); p != "" {
		v.mu.Lock()
		v.problems = append(v.problems, p)
		v.mu.Unlock()
		problem(401, "Unauthorized", p)
		return
	}
	var body map[string]string
	if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&body) != nil ||
		body["message_type"] != "text" || body["channel"] != "sms" || body["to"] == "" ||
		strings.HasPrefix(body["to"], "+") || body["from"] == "" || body["text"] == "" {
		v.mu.Lock()
		v.problems = append(v.problems, fmt.Sprintf("body %v", body))
		v.mu.Unlock()
		problem(422, "Invalid params", "The value of one or more parameters is invalid.")
		return
	}
	v.mu.Lock()
	v.received = append(v.received, body)
	var a answer
	if len(v.answers) > 0 {
		a, v.answers = v.answers[0], v.answers[1:]
	}
	v.mu.Unlock()
	if a.status == 0 {
		a = answer{status: 202, body: map[string]any{"message_uuid": "aaaaaaaa-bbbb-cccc-dddd-0123456789ab"}}
	}
	for k, val := range a.header {
		w.Header().Set(k, val)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_ = json.NewEncoder(w).Encode(a.body)
}

func (v *vonage) queue(a answer) {
	v.mu.Lock()
	v.answers = append(v.answers, a)
	v.mu.Unlock()
}

func (v *vonage) check(t *testing.T) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, p := range v.problems {
		t.Errorf("the Vonage fake refused a request: %s", p)
	}
}

func vonageEntry(v *vonage) *sms.Provider {
	return &sms.Provider{Kind: sms.KindVonage, Name: "vonage", ApplicationID: vonageApp, PrivateKey: vonagePEM, // startVonage made it
		From: "Acme", BaseURL: v.URL}
}

func twilioEntry(tw *twilio) *sms.Provider {
	return &sms.Provider{Kind: sms.KindTwilio, Name: "twilio", AccountSID: sid, AuthToken: token,
		From: "+15005550006", BaseURL: tw.URL}
}

func providersSender(t *testing.T, ps ...*sms.Provider) *sms.Sender {
	t.Helper()
	s, err := sms.New(&sms.Config{Providers: ps, MaxSegments: 3, Timeout: config.Duration(5 * time.Second)},
		map[string]*sms.Templates{"comment.created": {Text: "{{.author}} commented: {{.body}}"}}, sms.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sendReport(s *sms.Sender, m channels.Message) (*channels.Report, error) {
	ctx, rep := channels.WithReport(context.Background())
	err := s.Send(ctx, m)
	return rep, err
}

// TestVonageSends sends a text through Vonage's fake, which checks the
// JWT's signature and claims and the body, and records the provider and
// its message_uuid.
func TestVonageSends(t *testing.T) {
	t.Parallel()
	v := startVonage(t, false)
	s := providersSender(t, vonageEntry(v))
	rep, err := sendReport(s, message("hello"))
	v.check(t)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Provider != "vonage (1 segment)" || rep.ProviderMessageID != "aaaaaaaa-bbbb-cccc-dddd-0123456789ab" {
		t.Errorf("report %q %q", rep.Provider, rep.ProviderMessageID)
	}
	got := v.received[0]
	if got["to"] != "14155550123" || got["from"] != "Acme" || got["text"] != "Ada commented: hello" {
		t.Errorf("body %v", got)
	}
	// The JWT is reused, not signed per text, while it is valid.
	if _, err := sendReport(s, message("again")); err != nil {
		t.Fatal(err)
	}
	v.check(t)
}

// TestTwilioProviderRecordsSid: a Twilio entry of the list records its name,
// the billed segments and the Message's sid.
func TestTwilioProviderRecordsSid(t *testing.T) {
	t.Parallel()
	tw := startTwilio(t)
	s := providersSender(t, twilioEntry(tw))
	rep, err := sendReport(s, message("hello"))
	if err != nil || rep.Provider != "twilio (1 segment)" || rep.ProviderMessageID != "SM123" {
		t.Fatalf("report %q %q, %v", rep.Provider, rep.ProviderMessageID, err)
	}
}

// TestSMSProviderErrorClasses answers each provider's documented errors
// first: a refusal of the number or the text fails the delivery with no
// other provider tried; the provider's own trouble (credentials, balance,
// rate, 5xx) moves the text to the next provider in the same attempt.
func TestSMSProviderErrorClasses(t *testing.T) {
	t.Parallel()
	twErr := func(status, code int, msg string) answer {
		return answer{status: status, body: map[string]any{"code": code, "message": msg, "status": status,
			"more_info": fmt.Sprintf("https://www.twilio.com/docs/errors/%d", code)}}
	}
	vgErr := func(status int, num, title string) answer {
		return answer{status: status, body: map[string]any{"type": "https://developer.vonage.com/api-errors/messages#" + num,
			"title": title, "detail": title, "instance": "bf0ca0bf927b3b52e3cb03217e1a1ddf"}}
	}
	for _, c := range []struct {
		name  string
		kind  string
		a     answer
		final channels.Kind // 0: fails over
	}{
		{"twilio invalid number", sms.KindTwilio, twErr(400, 21211, "The 'To' number is not a valid phone number."), channels.KindPermanent},
		{"twilio unsubscribed", sms.KindTwilio, twErr(400, 21610, "Attempt to send to unsubscribed recipient"), channels.KindPermanent},
		{"twilio credentials", sms.KindTwilio, twErr(401, 20003, "Authenticate"), 0},
		{"twilio rate", sms.KindTwilio, answer{status: 429, header: map[string]string{"Retry-After": "3"}, body: map[string]any{"code": 20429, "message": "Too Many Requests"}}, 0},
		{"twilio 5xx", sms.KindTwilio, twErr(503, 20500, "Service Unavailable"), 0},
		{"vonage invalid params", sms.KindVonage, vgErr(422, "1150", "Invalid params"), channels.KindPermanent},
		{"vonage bad request", sms.KindVonage, vgErr(400, "1020", "Invalid sender"), channels.KindPermanent},
		{"vonage unauthorized", sms.KindVonage, vgErr(401, "1010", "Unauthorized"), 0},
		{"vonage low balance", sms.KindVonage, vgErr(402, "1170", "Low balance"), 0},
		{"vonage throttled", sms.KindVonage, vgErr(429, "1000", "Throttled"), 0},
		{"vonage 5xx", sms.KindVonage, vgErr(500, "1050", "Internal Error"), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var first *sms.Provider
			backup := startTwilio(t)
			if c.kind == sms.KindTwilio {
				tw := startTwilio(t)
				tw.queue(c.a)
				first = twilioEntry(tw)
			} else {
				v := startVonage(t, false)
				v.queue(c.a)
				first = vonageEntry(v)
				defer v.check(t)
			}
			next := twilioEntry(backup)
			next.Name = "backup"
			s := providersSender(t, first, next)
			rep, err := sendReport(s, message("hi"))
			if c.final != 0 {
				if k, _ := channels.Classify(err); k != c.final {
					t.Errorf("kind %v, want %v: %v", k, c.final, err)
				}
				if n := len(backup.messages()); n != 0 {
					t.Errorf("the next provider got %d texts, want none", n)
				}
				if !strings.HasPrefix(rep.Provider, first.Name) {
					t.Errorf("provider %q, want %s", rep.Provider, first.Name)
				}
				return
			}
			if err != nil || rep.Provider != "backup (1 segment)" || rep.ProviderMessageID != "SM123" || len(backup.messages()) != 1 {
				t.Errorf("report %q %q, err %v, backup got %d; want sent through backup", rep.Provider, rep.ProviderMessageID, err,
					len(backup.messages()))
			}
		})
	}
}

// TestSMSProviderDownFailsOver: a provider whose port refuses connections
// passes the text to the next within one Send; with every provider down
// the send is temporary and names each.
func TestSMSProviderDownFailsOver(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	tw := startTwilio(t)
	first := twilioEntry(tw)
	first.BaseURL, first.Name = dead, "twilio-down"
	v := startVonage(t, false)
	s := providersSender(t, first, vonageEntry(v))
	rep, err := sendReport(s, message("hi"))
	if err != nil || rep.Provider != "vonage (1 segment)" {
		t.Fatalf("report %q, %v; want sent through vonage", rep.Provider, err)
	}
	v.check(t)
	second := vonageEntry(v)
	second.BaseURL = dead
	s = providersSender(t, first, second)
	_, err = sendReport(s, message("hi"))
	if k, _ := channels.Classify(err); k != channels.KindTemporary || !strings.Contains(err.Error(), "every sms provider failed") {
		t.Errorf("every provider down: %v (%v)", err, k)
	}
}

// TestSMSHungProviderHoldsNoneOfTheNext sends 1,000 texts while the first
// provider takes requests and never answers: each text waits for it at most
// its timeout, its breaker opens after three such failures, and every text
// goes out through the next provider within 5 seconds.
func TestSMSHungProviderHoldsNoneOfTheNext(t *testing.T) {
	t.Parallel()
	hung := startVonage(t, true)
	tw := startTwilio(t)
	first := vonageEntry(hung)
	first.Lanes, first.Timeout = 8, config.Duration(300*time.Millisecond)
	next := twilioEntry(tw)
	next.Lanes = 32
	s := providersSender(t, first, next)
	const total, workers = 1000, 32
	var sent atomic.Int64
	var failed sync.Map
	ids := make(chan int, total)
	for i := range total {
		ids <- i
	}
	close(ids)
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range ids {
				rep, err := sendReport(s, message(fmt.Sprint(i)))
				if err != nil || rep.Provider != "twilio (1 segment)" {
					failed.Store(i, fmt.Sprintf("%q %v", rep.Provider, err))
					continue
				}
				sent.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	failed.Range(func(k, v any) bool { t.Errorf("text %v: %v", k, v); return false })
	if n := sent.Load(); n != total || len(tw.messages()) != total {
		t.Errorf("sent %d, the next provider got %d; want %d", n, len(tw.messages()), total)
	}
	if n := hung.count.Load(); n > 8+2 {
		t.Errorf("the hung provider got %d requests, want at most its 8 lanes and 2", n)
	}
	if elapsed > 5*time.Second {
		t.Errorf("%d texts behind a hung provider took %s, want at most 5s", total, elapsed)
	}
	t.Logf("%d texts behind a hung provider sent through the next in %s", total, elapsed)
}

// TestSMSProvidersConfig loads a providers list from YAML, sends through
// it, and reports every bad entry at its key and line.
func TestSMSProvidersConfig(t *testing.T) {
	// Not parallel: it sets the environment its ${VAR}s read.
	reg, err := channels.NewRegistry(sms.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	_, key := testKey(t)
	v := startVonage(t, false)
	t.Setenv("SMS_TEST_VONAGE_KEY", key)
	t.Setenv("SMS_TEST_UNSET", "")
	good := `channels:
  sms:
    allowed_countries: ["1"]
    providers:
      - {kind: vonage, application_id: ` + vonageApp + `, private_key: "${SMS_TEST_VONAGE_KEY}", from: Acme, base_url: "` + v.URL + `", rate: 10/s, lanes: 4}
      - {kind: twilio, account_sid: ` + sid + `, auth_token: t, from: "+15005550006"}
notifiers:
  comment.created:
    channels:
      sms: {text: "{{.author}} commented: {{.body}}"}
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
	rep, err := sendReport(set.Channels[sms.Name].(*sms.Sender), message("hi"))
	if err != nil || rep.Provider != "vonage (1 segment)" {
		t.Fatalf("send: %q %v", rep.Provider, err)
	}
	v.check(t)
	m := message("hi")
	m.Recipient.Phone = "+447700900123"
	if _, err := sendReport(set.Channels[sms.Name].(*sms.Sender), m); err == nil || !strings.Contains(err.Error(), "allowed_countries") {
		t.Errorf("a number outside allowed_countries: %v", err)
	}

	bad := `channels:
  sms:
    account_sid: ` + sid + `
    providers:
      - {kind: messagebird, from: Acme}
      - {kind: vonage, application_id: nope, private_key: "${SMS_TEST_UNSET}", from: "+1 415"}
      - {kind: twilio, account_sid: ` + sid + `, auth_token: "${SMS_TEST_UNSET}", from: Acme, rate: fast, lanes: -1}
      - {kind: vonage, application_id: ` + vonageApp + `, private_key: "not a key", from: Acme, name: twilio, base_url: "http://api.example.test"}
`
	_, err = config.ParseWith("test.yaml", []byte(bad), reg.CheckToRun)
	if err == nil {
		t.Fatal("a bad providers list passed")
	}
	for _, want := range []string{
		"test.yaml:4: channels.sms.providers: set either account_sid, auth_token and from or providers",
		`test.yaml:5: channels.sms.providers[0].kind: unknown provider kind "messagebird"`,
		"test.yaml:6: channels.sms.providers[1].application_id: want the Vonage application's id",
		"test.yaml:6: channels.sms.providers[1].private_key: must be set (for example ${VONAGE_PRIVATE_KEY}) (set SMS_TEST_UNSET)",
		"test.yaml:6: channels.sms.providers[1].from: want an E.164 number",
		"test.yaml:7: channels.sms.providers[2].auth_token: must be set (for example ${TWILIO_AUTH_TOKEN}) (set SMS_TEST_UNSET)",
		"test.yaml:7: channels.sms.providers[2].rate: want a rate such as 14/s",
		"test.yaml:7: channels.sms.providers[2].lanes: must not be negative",
		"test.yaml:8: channels.sms.providers[3].private_key: want the application's private key in PEM",
		`test.yaml:8: channels.sms.providers[3].name: "twilio" is the name of providers[2] too`,
		"test.yaml:8: channels.sms.providers[3].base_url: must be an https URL",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
}
