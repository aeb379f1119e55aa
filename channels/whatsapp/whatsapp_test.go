package whatsapp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/whatsapp"
	"github.com/notifyd/notifyd/config"
)

const (
	phoneID    = "106540352242922"
	token      = "EAAGm0PX4ZCps"
	sid        = "AC0123456789abcdef0123456789abcdef"
	authToken  = "tok3n"
	contentSID = "HX0123456789abcdef0123456789abcdef"
)

// fake is a local WhatsApp API: the Cloud API's /{version}/{phone id}/messages
// or Twilio's Messages.json. It checks each request as the provider does
// (path, auth, body fields) and answers the queued answer, else the
// provider's documented success.
type fake struct {
	*httptest.Server
	provider string
	mu       sync.Mutex
	bodies   []map[string]any
	problems []string
	answers  []answer
}

type answer struct {
	status int
	header map[string]string
	body   string
}

func startFake(t *testing.T, provider string) *fake {
	t.Helper()
	f := &fake{provider: provider}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	got, problem := f.read(r)
	if problem != "" {
		f.problems = append(f.problems, problem)
	}
	f.bodies = append(f.bodies, got)
	a := answer{200, nil, `{"messaging_product":"whatsapp","contacts":[{"input":"14155550123","wa_id":"14155550123"}],"messages":[{"id":"wamid.HBgLMTQxNTU1NTAxMjMVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA"}]}`}
	if f.provider == whatsapp.ProviderTwilio {
		a = answer{201, nil, `{"sid":"SM0123456789abcdef0123456789abcdef","status":"queued","to":"whatsapp:+14155550123"}`}
	}
	if len(f.answers) > 0 {
		a, f.answers = f.answers[0], f.answers[1:]
	}
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = w.Write([]byte(a.body))
}

// read returns the request's fields and what the provider would refuse.
func (f *fake) read(r *http.Request) (map[string]any, string) {
	if r.Method != http.MethodPost {
		return nil, "method " + r.Method
	}
	if f.provider == whatsapp.ProviderTwilio {
		user, pass, ok := r.BasicAuth()
		if r.URL.Path != "/2010-04-01/Accounts/"+sid+"/Messages.json" || !ok || user != sid || pass != authToken ||
			r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" || r.ParseForm() != nil {
			return nil, "request " + r.URL.Path
		}
		m := map[string]any{}
		for k := range r.PostForm {
			m[k] = r.PostForm.Get(k)
		}
		if m["To"] != "whatsapp:+14155550123" || m["From"] != "whatsapp:+15005550006" || (m["Body"] == nil) == (m["ContentSid"] == nil) {
			return m, fmt.Sprintf("fields %v", m)
		}
		return m, ""
	}
	if r.URL.Path != "/v21.0/"+phoneID+"/messages" || r.Header.Get("Authorization") != "Bearer "+token ||
		r.Header.Get("Content-Type") != "application/json" {
		return nil, "request " + r.URL.Path + " " + r.Header.Get("Authorization")
	}
	var m map[string]any
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		return nil, "body is not JSON"
	}
	if m["messaging_product"] != "whatsapp" || m["to"] != "14155550123" || m[fmt.Sprint(m["type"])] == nil {
		return m, fmt.Sprintf("fields %v", m)
	}
	return m, ""
}

func (f *fake) queue(a answer) {
	f.mu.Lock()
	f.answers = append(f.answers, a)
	f.mu.Unlock()
}

func (f *fake) last(t *testing.T) map[string]any {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.problems {
		t.Errorf("the fake refused a request: %s", p)
	}
	if len(f.bodies) == 0 {
		t.Fatal("no request")
	}
	return f.bodies[len(f.bodies)-1]
}

var now = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func newSender(t *testing.T, f *fake, t2 *whatsapp.Templates) *whatsapp.Sender {
	t.Helper()
	cfg := &whatsapp.Config{Provider: f.provider, PhoneNumberID: phoneID, AccessToken: token, APIURL: f.URL,
		AccountSID: sid, AuthToken: authToken, From: "+15005550006", BaseURL: f.URL}
	s, err := whatsapp.New(cfg, map[string]*whatsapp.Templates{"order.shipped": t2},
		whatsapp.Options{Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func both() *whatsapp.Templates {
	return &whatsapp.Templates{
		Template: &whatsapp.Template{Name: "order_shipped", Language: "en_US", ContentSID: contentSID,
			Params: []string{"{{.name}}", "{{.order}}\n(tracking {{.tracking}})"}},
		Text: "Your order {{.order}} shipped.",
	}
}

func message(lastInbound any) channels.Message {
	data := map[string]any{}
	if lastInbound != nil {
		data["whatsapp_last_inbound"] = lastInbound
	}
	return channels.Message{DeliveryID: "d-1", Notifier: "order.shipped",
		Recipient: &channels.Recipient{ID: "u1", Phone: "+14155550123", Data: data},
		Params:    map[string]any{"name": "Ann", "order": "A-17", "tracking": "1Z999"}}
}

func send(s *whatsapp.Sender, m channels.Message) (*channels.Report, error) {
	ctx, rep := channels.WithReport(context.Background())
	err := s.Send(ctx, m)
	return rep, err
}

// TestCloudAPITemplateOutsideTheWindow: a recipient who never wrote (or
// wrote more than 24 hours ago) gets the template with its params rendered
// and made one line; the wamid is recorded.
func TestCloudAPITemplateOutsideTheWindow(t *testing.T) {
	t.Parallel()
	f := startFake(t, whatsapp.ProviderCloudAPI)
	s := newSender(t, f, both())
	for _, last := range []any{nil, now.Add(-25 * time.Hour).Format(time.RFC3339)} {
		rep, err := send(s, message(last))
		if err != nil {
			t.Fatal(err)
		}
		if rep.Provider != "cloud_api" || !strings.HasPrefix(rep.ProviderMessageID, "wamid.") {
			t.Errorf("report %q %q", rep.Provider, rep.ProviderMessageID)
		}
		b, _ := json.Marshal(f.last(t))
		want := `"template":{"components":[{"parameters":[{"text":"Ann","type":"text"},{"text":"A-17 (tracking 1Z999)","type":"text"}],"type":"body"}],"language":{"code":"en_US"},"name":"order_shipped"},"to":"14155550123","type":"template"`
		if !strings.Contains(string(b), want) {
			t.Errorf("body %s\nwant it to hold %s", b, want)
		}
	}
}

// TestFreeTextInsideTheWindow: within 24 hours of the recipient's last
// message (RFC 3339 or Unix seconds) the notifier's text is sent.
func TestFreeTextInsideTheWindow(t *testing.T) {
	t.Parallel()
	for _, p := range []string{whatsapp.ProviderCloudAPI, whatsapp.ProviderTwilio} {
		f := startFake(t, p)
		s := newSender(t, f, both())
		for _, last := range []any{now.Add(-time.Hour).Format(time.RFC3339), float64(now.Add(-23 * time.Hour).Unix())} {
			if _, err := send(s, message(last)); err != nil {
				t.Fatal(err)
			}
			got := f.last(t)
			if p == whatsapp.ProviderTwilio {
				if got["Body"] != "Your order A-17 shipped." {
					t.Errorf("%s: body %v", p, got)
				}
				continue
			}
			if got["type"] != "text" || got["text"].(map[string]any)["body"] != "Your order A-17 shipped." {
				t.Errorf("%s: body %v", p, got)
			}
		}
	}
}

// TestTextOnlyOutsideTheWindowIsRefused: without a template, a recipient
// outside the window is refused without a request.
func TestTextOnlyOutsideTheWindowIsRefused(t *testing.T) {
	t.Parallel()
	f := startFake(t, whatsapp.ProviderCloudAPI)
	s := newSender(t, f, &whatsapp.Templates{Text: "Your order {{.order}} shipped."})
	_, err := send(s, message(nil))
	if k, _ := channels.Classify(err); k != channels.KindPermanent || !strings.Contains(err.Error(), "24 hours") {
		t.Errorf("%v (%v), want refused for the window", err, k)
	}
	if len(f.bodies) != 0 {
		t.Errorf("the API got %d requests", len(f.bodies))
	}
}

// TestTwilioTemplate: Twilio's sender gets the Content template's SID and
// its variables as JSON, and the Message's sid is recorded.
func TestTwilioTemplate(t *testing.T) {
	t.Parallel()
	f := startFake(t, whatsapp.ProviderTwilio)
	s := newSender(t, f, both())
	rep, err := send(s, message(nil))
	if err != nil {
		t.Fatal(err)
	}
	got := f.last(t)
	if got["ContentSid"] != contentSID || got["ContentVariables"] != `{"1":"Ann","2":"A-17 (tracking 1Z999)"}` {
		t.Errorf("fields %v", got)
	}
	if rep.Provider != "twilio" || rep.ProviderMessageID != "SM0123456789abcdef0123456789abcdef" {
		t.Errorf("report %q %q", rep.Provider, rep.ProviderMessageID)
	}
}

// TestErrorClasses answers each provider's documented errors.
func TestErrorClasses(t *testing.T) {
	t.Parallel()
	cloud := func(status, code int, msg string) answer {
		return answer{status, nil, fmt.Sprintf(`{"error":{"message":"(#%d) %s","type":"OAuthException","code":%d,"error_data":{"messaging_product":"whatsapp","details":"%s"},"fbtrace_id":"AbCdEf"}}`,
			code, msg, code, msg)}
	}
	tw := func(status, code int, msg string) answer {
		return answer{status, nil, fmt.Sprintf(`{"code":%d,"message":"%s","more_info":"https://www.twilio.com/docs/errors/%d","status":%d}`, code, msg, code, status)}
	}
	for _, c := range []struct {
		name, provider string
		a              answer
		want           channels.Kind
	}{
		{"not a whatsapp user", whatsapp.ProviderCloudAPI, cloud(400, 131026, "Message Undeliverable."), channels.KindPermanent},
		{"template does not exist", whatsapp.ProviderCloudAPI, cloud(404, 132001, "Template name does not exist in the translation"), channels.KindPermanent},
		{"template paused", whatsapp.ProviderCloudAPI, cloud(400, 132015, "Template is Paused"), channels.KindPermanent},
		{"param count", whatsapp.ProviderCloudAPI, cloud(400, 132000, "Number of parameters does not match"), channels.KindPermanent},
		{"re-engagement", whatsapp.ProviderCloudAPI, cloud(400, 131047, "Re-engagement message"), channels.KindPermanent},
		{"cloud rate limit", whatsapp.ProviderCloudAPI, cloud(429, 130429, "Rate limit hit"), channels.KindRateLimited},
		{"pair rate limit", whatsapp.ProviderCloudAPI, cloud(400, 131056, "(Business Account, Consumer Account) pair rate limit hit"), channels.KindRateLimited},
		{"cloud token expired", whatsapp.ProviderCloudAPI, cloud(401, 190, "Access token has expired"), channels.KindTemporary},
		{"cloud 5xx", whatsapp.ProviderCloudAPI, cloud(500, 131000, "Something went wrong"), channels.KindTemporary},
		{"twilio not a whatsapp user", whatsapp.ProviderTwilio, tw(400, 63003, "Channel could not find To address"), channels.KindPermanent},
		{"twilio outside window", whatsapp.ProviderTwilio, tw(400, 63016, "Failed to send freeform message because you are outside the allowed window"), channels.KindPermanent},
		{"twilio rate", whatsapp.ProviderTwilio, answer{429, map[string]string{"Retry-After": "7"}, `{"code":20429,"message":"Too Many Requests","status":429}`}, channels.KindRateLimited},
		{"twilio 5xx", whatsapp.ProviderTwilio, tw(503, 20503, "Service Unavailable"), channels.KindTemporary},
		{"twilio credentials", whatsapp.ProviderTwilio, tw(401, 20003, "Authenticate"), channels.KindTemporary},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := startFake(t, c.provider)
			f.queue(c.a)
			s := newSender(t, f, both())
			_, err := send(s, message(nil))
			k, after := channels.Classify(err)
			if k != c.want {
				t.Errorf("kind %v, want %v: %v", k, c.want, err)
			}
			if c.name == "twilio rate" && after != 7*time.Second {
				t.Errorf("retry after %s, want Retry-After's 7s", after)
			}
			f.last(t)
		})
	}
}

// TestServerDownIsTemporary: a connection refused is retried.
func TestServerDownIsTemporary(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{provider: whatsapp.ProviderCloudAPI, Server: &httptest.Server{URL: "http://" + ln.Addr().String()}}
	ln.Close()
	s := newSender(t, f, both())
	_, err = send(s, message(nil))
	if k, _ := channels.Classify(err); k != channels.KindTemporary || strings.Contains(err.Error(), token) {
		t.Errorf("%v (%v)", err, k)
	}
}

// TestConfig opens a config through the registry and reports every
// problem at its key and line, naming the variable a secret was left to.
func TestConfig(t *testing.T) {
	reg, err := channels.NewRegistry(whatsapp.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("WHATSAPP_TEST_UNSET", "")
	f := startFake(t, whatsapp.ProviderCloudAPI)
	good := `channels:
  whatsapp: {provider: cloud_api, phone_number_id: "` + phoneID + `", access_token: ` + token + `, api_url: "` + f.URL + `"}
notifiers:
  order.shipped:
    example: {name: Ann, order: A-17, tracking: 1Z}
    channels:
      whatsapp:
        template: {name: order_shipped, language: en_US, params: ["{{.name}}", "{{.order}}"]}
        text: "Your order {{.order}} shipped."
`
	c, err := config.ParseWith("test.yaml", []byte(good), reg.CheckToRun)
	if err != nil {
		t.Fatal(err)
	}
	set, err := reg.Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if _, err := send(set.Channels[whatsapp.Name].(*whatsapp.Sender), message(nil)); err != nil {
		t.Fatal(err)
	}
	f.last(t)

	bad := `channels:
  whatsapp:
    provider: twilio
    account_sid: nope
    auth_token: ${WHATSAPP_TEST_UNSET}
    from: "+1 415"
notifiers:
  a:
    channels:
      whatsapp: {template: {name: x, params: ["{{.x"]}}
  b:
    channels:
      whatsapp: {}
`
	_, err = config.ParseWith("test.yaml", []byte(bad), reg.CheckToRun)
	if err == nil {
		t.Fatal("a bad config passed")
	}
	for _, want := range []string{
		"test.yaml:4: channels.whatsapp.account_sid: want a Twilio account SID",
		"test.yaml:5: channels.whatsapp.auth_token: must be set (for example ${TWILIO_AUTH_TOKEN}) (set WHATSAPP_TEST_UNSET)",
		"test.yaml:6: channels.whatsapp.from: want the WhatsApp sender's E.164 number",
		"test.yaml:10: notifiers.a.channels.whatsapp.template.content_sid: want the approved Content template's SID",
		"notifiers.a.channels.whatsapp.template.params[0]:",
		"notifiers.b.channels.whatsapp.template: must be set",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack %q:\n%v", want, err)
		}
	}
}
