package email_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/email"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/smtpcapture"
)

// answer is what a fake provider answers one request with.
type answer struct {
	status int
	header map[string]string
	body   string
	hang   bool // never answer (until the test ends)
}

// fakeAPI is an email API on 127.0.0.1: it checks each request the way
// the provider does (check returns what is wrong with it, "" for nothing)
// and answers with the next scripted answer, else ok.
type fakeAPI struct {
	srv   *httptest.Server
	check func(r *http.Request, body []byte) string
	ok    answer

	mu       sync.Mutex
	script   []answer
	latest   *recorded // the last request
	problems []string
	count    atomic.Int64
}

type recorded struct {
	r    *http.Request
	body []byte
}

func startFake(t testing.TB, check func(r *http.Request, body []byte) string, ok answer) *fakeAPI {
	t.Helper()
	f := &fakeAPI{check: check, ok: ok}
	stop := make(chan struct{})
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.count.Add(1)
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.latest = &recorded{r, body}
		if p := f.check(r, body); p != "" {
			f.problems = append(f.problems, p)
		}
		a := f.ok
		if len(f.script) > 0 {
			a = f.script[0]
			if len(f.script) > 1 || !f.script[0].hang {
				f.script = f.script[1:]
			}
		}
		f.mu.Unlock()
		if a.hang {
			select {
			case <-stop:
			case <-r.Context().Done():
			}
			return
		}
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(func() { close(stop); f.srv.Close() })
	return f
}

// answerNext scripts the next answers (a last hang answer repeats).
func (f *fakeAPI) answerNext(a ...answer) {
	f.mu.Lock()
	f.script = append(f.script, a...)
	f.mu.Unlock()
}

func (f *fakeAPI) last(t *testing.T) recorded {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.problems) > 0 {
		t.Fatalf("the fake refused requests: %q", f.problems)
	}
	if f.latest == nil {
		t.Fatal("the fake got no request")
	}
	return *f.latest
}

// kindCase is one provider kind: its config entry pointing at its fake, the
// fake's request check, and the provider's documented answers.
type kindCase struct {
	kind   string
	entry  func(url string) *email.Provider
	check  func(r *http.Request, body []byte) string
	ok     answer
	wantID string
	// body checks the fields of a request that went through.
	body func(t *testing.T, rec recorded)
	// errors are the documented error answers and what each does.
	errors []errorCase
}

type errorCase struct {
	name string
	a    answer
	// final: the delivery fails with want and no other provider is tried;
	// else the message fails over to the next provider.
	final bool
	want  channels.Kind
}

const (
	sesKey    = "AKIDEXAMPLE"
	sesSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
)

func jsonBody(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, b)
	}
	return m
}

func wantJSONPost(r *http.Request, path string) string {
	switch {
	case r.Method != http.MethodPost:
		return "method " + r.Method
	case r.URL.Path != path:
		return "path " + r.URL.Path
	case r.Header.Get("Content-Type") != "application/json":
		return "content-type " + r.Header.Get("Content-Type")
	}
	return ""
}

// checkRaw checks a raw message a provider received: notifyd's own MIME.
func checkRaw(t *testing.T, raw string) {
	t.Helper()
	for _, want := range []string{"Message-ID: <d-1@acme.test>", "X-Notifyd-Delivery: d-1",
		"X-Notifyd-Notifier: comment.created", "Subject: New comment on Hello", "multipart/alternative"} {
		if !strings.Contains(raw, want) {
			t.Errorf("raw message lacks %q:\n%s", want, raw)
		}
	}
}

func kindCases() []kindCase {
	return []kindCase{{
		kind: email.KindSES,
		entry: func(url string) *email.Provider {
			return &email.Provider{Kind: email.KindSES, Name: "ses-main", Endpoint: url, Region: "us-east-1",
				AccessKeyID: sesKey, SecretAccessKey: sesSecret, ConfigurationSet: "notifyd"}
		},
		check: func(r *http.Request, body []byte) string {
			if p := wantJSONPost(r, email.SESPath); p != "" {
				return p
			}
			if got, want := email.VerifySigV4(r, body, sesKey, sesSecret, "us-east-1"); got != want {
				return "signature " + got + " want " + want
			}
			if !strings.Contains(r.Header.Get("Authorization"), "/us-east-1/ses/aws4_request") {
				return "scope " + r.Header.Get("Authorization")
			}
			return ""
		},
		ok:     answer{status: 200, body: `{"MessageId":"0100018c7f3a2b1e-6b3f1c2d-ses-000000"}`},
		wantID: "0100018c7f3a2b1e-6b3f1c2d-ses-000000",
		body: func(t *testing.T, rec recorded) {
			m := jsonBody(t, rec.body)
			if m["FromEmailAddress"] != `"Acme" <notify@acme.test>` || m["ConfigurationSetName"] != "notifyd" {
				t.Errorf("from / configuration set: %v %v", m["FromEmailAddress"], m["ConfigurationSetName"])
			}
			if to := m["Destination"].(map[string]any)["ToAddresses"].([]any); len(to) != 1 || to[0] != `"Ann" <ann@example.test>` {
				t.Errorf("to = %v", to)
			}
			raw, err := base64.StdEncoding.DecodeString(m["Content"].(map[string]any)["Raw"].(map[string]any)["Data"].(string))
			if err != nil {
				t.Fatal(err)
			}
			checkRaw(t, string(raw))
		},
		errors: []errorCase{
			{"MessageRejected", answer{status: 400, header: map[string]string{"X-Amzn-ErrorType": "MessageRejected:http://internal.amazon.com/coral/com.amazonaws.sesv2/"},
				body: `{"message":"Email address is not verified. The following identities failed the check in region US-EAST-1: ann@example.test"}`}, true, channels.KindPermanent},
			{"BadRequestException", answer{status: 400, header: map[string]string{"X-Amzn-ErrorType": "BadRequestException"},
				body: `{"message":"Missing final '@domain'"}`}, true, channels.KindPermanent},
			{"TooManyRequestsException", answer{status: 429, header: map[string]string{"X-Amzn-ErrorType": "TooManyRequestsException"},
				body: `{"message":"Maximum sending rate exceeded."}`}, false, 0},
			{"SendingPausedException", answer{status: 400, header: map[string]string{"X-Amzn-ErrorType": "SendingPausedException"},
				body: `{"message":"Sending is paused for this account."}`}, false, 0},
			{"SignatureDoesNotMatch", answer{status: 403, header: map[string]string{"X-Amzn-ErrorType": "SignatureDoesNotMatch"},
				body: `{"message":"The request signature we calculated does not match the signature you provided."}`}, false, 0},
			{"InternalFailure", answer{status: 500, header: map[string]string{"X-Amzn-ErrorType": "InternalFailure"},
				body: `{"message":"An internal error occurred."}`}, false, 0},
		},
	}, {
		kind: email.KindSendGrid,
		entry: func(url string) *email.Provider {
			return &email.Provider{Kind: email.KindSendGrid, Name: "sendgrid", Endpoint: url, APIKey: "SG.key"}
		},
		check: func(r *http.Request, body []byte) string {
			if p := wantJSONPost(r, email.SendGridPath); p != "" {
				return p
			}
			if r.Header.Get("Authorization") != "Bearer SG.key" {
				return "authorization " + r.Header.Get("Authorization")
			}
			return ""
		},
		ok:     answer{status: 202, header: map[string]string{"X-Message-Id": "W2SWv3KrQxOkpVfUEJnsuw"}},
		wantID: "W2SWv3KrQxOkpVfUEJnsuw",
		body: func(t *testing.T, rec recorded) {
			var m struct {
				Personalizations []struct {
					To []struct{ Email, Name string } `json:"to"`
				} `json:"personalizations"`
				From    struct{ Email, Name string } `json:"from"`
				Subject string                       `json:"subject"`
				Content []struct {
					Type, Value string
				} `json:"content"`
				Headers    map[string]string `json:"headers"`
				CustomArgs map[string]string `json:"custom_args"`
			}
			if err := json.Unmarshal(rec.body, &m); err != nil {
				t.Fatal(err)
			}
			if len(m.Personalizations) != 1 || len(m.Personalizations[0].To) != 1 || m.Personalizations[0].To[0].Email != "ann@example.test" ||
				m.From.Email != "notify@acme.test" || m.From.Name != "Acme" || m.Subject != "New comment on Hello" ||
				len(m.Content) != 2 || m.Content[0].Type != "text/plain" || m.Content[1].Type != "text/html" ||
				m.Headers["Message-ID"] != "<d-1@acme.test>" || m.Headers["X-Notifyd-Notifier"] != "comment.created" ||
				m.CustomArgs["notifyd_delivery"] != "d-1" {
				t.Errorf("body: %s", rec.body)
			}
		},
		errors: []errorCase{
			{"invalid recipient", answer{status: 400, body: `{"errors":[{"message":"Does not contain a valid address.","field":"personalizations.0.to.0.email","help":"http://sendgrid.com/docs/API_Reference/Web_API_v3/Mail/errors.html#message.personalizations.to"}]}`}, true, channels.KindPermanent},
			{"payload too large", answer{status: 413, body: `{"errors":[{"message":"The JSON payload you have included in your request is too large.","field":null,"help":null}]}`}, true, channels.KindPermanent},
			{"unauthorized", answer{status: 401, body: `{"errors":[{"message":"The provided authorization grant is invalid, expired, or revoked","field":null,"help":null}]}`}, false, 0},
			{"forbidden", answer{status: 403, body: `{"errors":[{"message":"The from address does not match a verified Sender Identity.","field":"from","help":null}]}`}, false, 0},
			{"too many requests", answer{status: 429, header: map[string]string{"Retry-After": "2"}, body: `{"errors":[{"field":null,"message":"too many requests"}]}`}, false, 0},
			{"server error", answer{status: 500, body: `{"errors":[{"field":null,"message":"An internal server error occurred."}]}`}, false, 0},
		},
	}, {
		kind: email.KindPostmark,
		entry: func(url string) *email.Provider {
			return &email.Provider{Kind: email.KindPostmark, Name: "postmark", Endpoint: url, ServerToken: "pm-token"}
		},
		check: func(r *http.Request, body []byte) string {
			if p := wantJSONPost(r, email.PostmarkPath); p != "" {
				return p
			}
			if r.Header.Get("X-Postmark-Server-Token") != "pm-token" || r.Header.Get("Accept") != "application/json" {
				return "token / accept " + r.Header.Get("X-Postmark-Server-Token") + " " + r.Header.Get("Accept")
			}
			return ""
		},
		ok:     answer{status: 200, body: `{"To":"ann@example.test","SubmittedAt":"2014-02-17T07:25:01.4178645-05:00","MessageID":"0a129aee-e1cd-480d-b08d-4f48548ff48d","ErrorCode":0,"Message":"OK"}`},
		wantID: "0a129aee-e1cd-480d-b08d-4f48548ff48d",
		body: func(t *testing.T, rec recorded) {
			var m struct {
				From, To, Subject, TextBody, HtmlBody, MessageStream string
				Headers                                              []struct{ Name, Value string }
				Metadata                                             map[string]string
			}
			if err := json.Unmarshal(rec.body, &m); err != nil {
				t.Fatal(err)
			}
			hasID := false
			for _, h := range m.Headers {
				hasID = hasID || h.Name == "Message-ID" && h.Value == "<d-1@acme.test>"
			}
			if m.From != `"Acme" <notify@acme.test>` || m.To != `"Ann" <ann@example.test>` || m.Subject != "New comment on Hello" ||
				m.TextBody == "" || !strings.Contains(m.HtmlBody, "&lt;script&gt;") || m.MessageStream != "outbound" || !hasID ||
				m.Metadata["notifyd_delivery"] != "d-1" {
				t.Errorf("body: %s", rec.body)
			}
		},
		errors: []errorCase{
			{"300 invalid email request", answer{status: 422, body: `{"ErrorCode":300,"Message":"Invalid 'To' address: 'ann@example'."}`}, true, channels.KindPermanent},
			{"406 inactive recipient", answer{status: 422, body: `{"ErrorCode":406,"Message":"You tried to send to recipient(s) that have been marked as inactive."}`}, true, channels.KindPermanent},
			{"400 sender signature not found", answer{status: 422, body: `{"ErrorCode":400,"Message":"The 'From' address you supplied is not a Sender Signature on your account."}`}, false, 0},
			{"10 bad token", answer{status: 401, body: `{"ErrorCode":10,"Message":"No Account or Server API tokens were supplied in the HTTP headers."}`}, false, 0},
			{"429", answer{status: 429, body: `{"ErrorCode":429,"Message":"Rate limit exceeded."}`}, false, 0},
			{"500", answer{status: 500, body: `{"ErrorCode":0,"Message":"Internal Server Error"}`}, false, 0},
		},
	}, {
		kind: email.KindMailgun,
		entry: func(url string) *email.Provider {
			return &email.Provider{Kind: email.KindMailgun, Name: "mailgun", Endpoint: url, Domain: "mg.acme.test", APIKey: "key-mg"}
		},
		check: func(r *http.Request, body []byte) string {
			if r.Method != http.MethodPost || r.URL.Path != "/v3/mg.acme.test/messages.mime" {
				return "request " + r.Method + " " + r.URL.Path
			}
			if u, p, ok := r.BasicAuth(); !ok || u != "api" || p != "key-mg" {
				return "basic auth"
			}
			if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "multipart/form-data" {
				return "content-type " + mt
			}
			return ""
		},
		ok:     answer{status: 200, body: `{"id":"<20111114174239.25659.5817@samples.mailgun.org>","message":"Queued. Thank you."}`},
		wantID: "20111114174239.25659.5817@samples.mailgun.org",
		body: func(t *testing.T, rec recorded) {
			_, params, _ := mime.ParseMediaType(rec.r.Header.Get("Content-Type"))
			mr := multipart.NewReader(strings.NewReader(string(rec.body)), params["boundary"])
			fields := map[string]string{}
			for {
				p, err := mr.NextPart()
				if err != nil {
					break
				}
				b, _ := io.ReadAll(p)
				fields[p.FormName()] = string(b)
			}
			if fields["to"] != "ann@example.test" || fields["v:notifyd_delivery"] != "d-1" {
				t.Errorf("fields: %v", fields)
			}
			checkRaw(t, fields["message"])
		},
		errors: []errorCase{
			{"400 bad recipient", answer{status: 400, body: `{"message":"to parameter is not a valid address. please check documentation"}`}, true, channels.KindPermanent},
			{"401 forbidden", answer{status: 401, body: `Forbidden`}, false, 0},
			{"404 domain", answer{status: 404, body: `{"message":"Domain not found: mg.acme.test"}`}, false, 0},
			{"429", answer{status: 429, body: `{"message":"Too many requests"}`}, false, 0},
			{"500", answer{status: 500, body: `{"message":"Internal server error"}`}, false, 0},
		},
	}, {
		kind: email.KindResend,
		entry: func(url string) *email.Provider {
			return &email.Provider{Kind: email.KindResend, Name: "resend", Endpoint: url, APIKey: "re_123"}
		},
		check: func(r *http.Request, body []byte) string {
			if p := wantJSONPost(r, email.ResendPath); p != "" {
				return p
			}
			if r.Header.Get("Authorization") != "Bearer re_123" || r.Header.Get("Idempotency-Key") == "" {
				return "authorization / idempotency key"
			}
			return ""
		},
		ok:     answer{status: 200, body: `{"id":"49a3999c-0ce1-4ea6-ab68-afcd6dc2e794"}`},
		wantID: "49a3999c-0ce1-4ea6-ab68-afcd6dc2e794",
		body: func(t *testing.T, rec recorded) {
			var m struct {
				From    string            `json:"from"`
				To      []string          `json:"to"`
				Subject string            `json:"subject"`
				Text    string            `json:"text"`
				HTML    string            `json:"html"`
				Headers map[string]string `json:"headers"`
			}
			if err := json.Unmarshal(rec.body, &m); err != nil {
				t.Fatal(err)
			}
			if m.From != `"Acme" <notify@acme.test>` || len(m.To) != 1 || m.To[0] != `"Ann" <ann@example.test>` ||
				m.Subject != "New comment on Hello" || m.Text == "" || m.HTML == "" || m.Headers["X-Notifyd-Delivery"] != "d-1" ||
				rec.r.Header.Get("Idempotency-Key") != "d-1" {
				t.Errorf("body: %s", rec.body)
			}
		},
		errors: []errorCase{
			{"422 validation_error", answer{status: 422, body: `{"statusCode":422,"message":"Invalid ` + "`to`" + ` field.","name":"validation_error"}`}, true, channels.KindPermanent},
			{"422 invalid_from_address", answer{status: 422, body: `{"statusCode":422,"message":"Invalid ` + "`from`" + ` field.","name":"invalid_from_address"}`}, false, 0},
			{"401 missing_api_key", answer{status: 401, body: `{"statusCode":401,"message":"Missing API key in the authorization header.","name":"missing_api_key"}`}, false, 0},
			{"403 validation_error", answer{status: 403, body: `{"statusCode":403,"message":"The acme.test domain is not verified.","name":"validation_error"}`}, false, 0},
			{"429 rate_limit_exceeded", answer{status: 429, body: `{"statusCode":429,"message":"Too many requests.","name":"rate_limit_exceeded"}`}, false, 0},
			{"500 internal_server_error", answer{status: 500, body: `{"statusCode":500,"message":"Unexpected error.","name":"internal_server_error"}`}, false, 0},
		},
	}}
}

// providersSender opens a Sender over the given providers.
func providersSender(t *testing.T, timeout time.Duration, ps ...*email.Provider) *email.Sender {
	t.Helper()
	cfg := &email.Config{From: "Acme <notify@acme.test>", Providers: ps, Timeout: config.Duration(timeout)}
	s, err := email.New(cfg, testDigest(), testNotifiers(), email.Options{Clock: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func smtpEntry(srv *smtpcapture.Server, name string) *email.Provider {
	return &email.Provider{Kind: email.KindSMTP, Name: name, Host: srv.Host(), Port: srv.Port(), TLS: "none"}
}

func sendReport(s *email.Sender, id string) (*channels.Report, error) {
	ctx, rep := channels.WithReport(context.Background())
	err := s.Send(ctx, msg(id, ann()))
	return rep, err
}

// TestProviderSends sends one message through each provider's fake, which
// checks the request as the provider does, and reads the provider and its
// message id off the report.
func TestProviderSends(t *testing.T) {
	t.Parallel()
	for _, c := range kindCases() {
		t.Run(c.kind, func(t *testing.T) {
			t.Parallel()
			f := startFake(t, c.check, c.ok)
			entry := c.entry(f.srv.URL)
			s := providersSender(t, 5*time.Second, entry)
			rep, err := sendReport(s, "d-1")
			if err != nil {
				t.Fatalf("send: %v", err)
			}
			if rep.Provider != entry.Name || rep.ProviderMessageID != c.wantID {
				t.Errorf("report = %q %q, want %q %q", rep.Provider, rep.ProviderMessageID, entry.Name, c.wantID)
			}
			c.body(t, f.last(t))
		})
	}
}

// TestProviderErrorClasses answers each documented error: a refusal of the
// message or address fails the delivery with no other provider tried; any
// other error moves the message to the next provider in the same attempt.
func TestProviderErrorClasses(t *testing.T) {
	t.Parallel()
	for _, c := range kindCases() {
		for _, e := range c.errors {
			t.Run(c.kind+"/"+e.name, func(t *testing.T) {
				t.Parallel()
				f := startFake(t, c.check, c.ok)
				f.answerNext(e.a)
				backup := smtpcapture.Start(t)
				s := providersSender(t, 5*time.Second, c.entry(f.srv.URL), smtpEntry(backup, "backup"))
				rep, err := sendReport(s, "d-1")
				f.last(t) // the request was well formed
				if e.final {
					if k := kind(t, err); k != e.want {
						t.Errorf("kind = %v, want %v (%v)", k, e.want, err)
					}
					if n := backup.Count(); n != 0 {
						t.Errorf("the next provider got %d messages, want none", n)
					}
					if rep.Provider != c.entry("").Name {
						t.Errorf("provider = %q", rep.Provider)
					}
					return
				}
				if err != nil {
					t.Fatalf("send: %v, want it sent through the next provider", err)
				}
				if rep.Provider != "backup" || rep.ProviderMessageID != "d-1@acme.test" || backup.Count() != 1 {
					t.Errorf("report %q %q, backup got %d", rep.Provider, rep.ProviderMessageID, backup.Count())
				}
			})
		}
	}
}

// TestPostmarkInactiveRecipientSuppresses: 406 names the address to suppress.
func TestPostmarkInactiveRecipientSuppresses(t *testing.T) {
	t.Parallel()
	c := kindCases()[2]
	f := startFake(t, c.check, c.ok)
	f.answerNext(c.errors[1].a)
	s := providersSender(t, 5*time.Second, c.entry(f.srv.URL))
	_, err := sendReport(s, "d-1")
	sup, ok := channels.SuppressionOf(err)
	if !ok || sup.Address != "ann@example.test" {
		t.Fatalf("error %v: want a suppression of ann@example.test", err)
	}
}

// TestProviderDownFailsOver: an API whose port refuses connections, then
// an SMTP server that is down, then one that works: the message goes out
// through the third within one Send.
func TestProviderDownFailsOver(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	down, up := smtpcapture.Start(t), smtpcapture.Start(t)
	down.Down()
	s := providersSender(t, 5*time.Second,
		&email.Provider{Kind: email.KindSendGrid, Name: "sendgrid", Endpoint: dead, APIKey: "k"},
		smtpEntry(down, "relay-a"), smtpEntry(up, "relay-b"))
	rep, err := sendReport(s, "d-1")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Provider != "relay-b" || up.Count() != 1 {
		t.Errorf("provider %q, relay-b got %d", rep.Provider, up.Count())
	}
	// Every provider down: temporary, naming each.
	up.Down()
	_, err = sendReport(s, "d-2")
	if k := kind(t, err); k != channels.KindTemporary || !strings.Contains(err.Error(), "every email provider failed") {
		t.Errorf("kind %v: %v", k, err)
	}
}

// TestProviderRateMovesToNext: a provider over its own rate hands the
// message to the next one; with every provider over its rate the send is
// rate limited.
func TestProviderRateMovesToNext(t *testing.T) {
	t.Parallel()
	a, b := smtpcapture.Start(t), smtpcapture.Start(t)
	pa, pb := smtpEntry(a, "a"), smtpEntry(b, "b")
	pa.Rate, pb.Rate = "1/h", "1/h"
	s := providersSender(t, 5*time.Second, pa, pb)
	for i, want := range []string{"a", "b"} {
		rep, err := sendReport(s, fmt.Sprintf("d-%d", i))
		if err != nil || rep.Provider != want {
			t.Fatalf("message %d: provider %q, err %v; want %s", i, rep.Provider, err, want)
		}
	}
	_, err := sendReport(s, "d-3")
	if k := kind(t, err); k != channels.KindRateLimited {
		t.Errorf("kind %v: %v", k, err)
	}
}

// TestHungProviderHoldsNoneOfTheNext sends 1,000 messages while the first
// provider accepts requests and never answers: each message waits for it at
// most its timeout (500 ms), its breaker opens after three such failures and
// the rest go straight to the next provider: all within 5 seconds, with at
// most one wave of sends having waited on the hung provider.
func TestHungProviderHoldsNoneOfTheNext(t *testing.T) {
	t.Parallel()
	c := kindCases()[0] // ses
	hung := startFake(t, c.check, answer{hang: true})
	next := startFake(t, kindCases()[1].check, kindCases()[1].ok)
	primary := c.entry(hung.srv.URL)
	primary.Lanes = 8
	primary.Timeout = config.Duration(500 * time.Millisecond)
	s := providersSender(t, 5*time.Second, primary, kindCases()[1].entry(next.srv.URL))

	const total, workers = 1000, 32
	var sent, slow atomic.Int64
	var failures sync.Map
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
				t0 := time.Now()
				rep, err := sendReport(s, fmt.Sprintf("d-%d", i))
				if time.Since(t0) >= 500*time.Millisecond {
					slow.Add(1)
				}
				if err != nil || rep.Provider != "sendgrid" {
					failures.Store(i, fmt.Sprintf("%q %v", rep.Provider, err))
					continue
				}
				sent.Add(1)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("sends still running after 2 minutes (%d sent)", sent.Load())
	}
	elapsed := time.Since(start)
	failures.Range(func(k, v any) bool { t.Errorf("message %v: %v", k, v); return false })
	if n := sent.Load(); n != total || next.count.Load() != total {
		t.Errorf("sent %d, the next provider got %d; want %d", n, next.count.Load(), total)
	}
	// Only the first wave tried the hung provider: its 8 lanes took 8
	// requests (and 2 more, taking the lanes its first two failures gave
	// back before the third opened its breaker), the rest of the wave
	// waited for a lane until the timeout, and after that its open breaker
	// sent everything straight on.
	if n := hung.count.Load(); n > 8+2 {
		t.Errorf("the hung provider got %d requests, want at most its 8 lanes and 2", n)
	}
	if n := slow.Load(); n > workers {
		t.Errorf("%d sends waited out the hung provider's timeout, want at most one wave of %d", n, workers)
	}
	if elapsed > 5*time.Second {
		t.Errorf("%d messages behind a hung provider took %s, want at most 5s", total, elapsed)
	}
	t.Logf("%d messages behind a hung provider sent through the next in %s (%d waited on the hung one)", total, elapsed, slow.Load())
}

// TestProvidersConfig loads a providers list from YAML and reports every
// bad entry at its key.
func TestProvidersConfig(t *testing.T) {
	t.Parallel()
	base := `
channels:
  email:
    from: "Acme <notify@acme.test>"
%s
notifiers:
  comment.created:
    channels:
      email:
        subject: "New comment on {{.post_title}}"
        text: "{{.body}}"
`
	f := startFake(t, kindCases()[1].check, kindCases()[1].ok)
	good := fmt.Sprintf(`    providers:
      - {kind: sendgrid, name: sg, api_key: SG.key, endpoint: %s, rate: 14/s, lanes: 4}
      - {kind: smtp, host: 127.0.0.1, port: 1}`, f.srv.URL)
	c, err := config.Parse("test.yaml", []byte(fmt.Sprintf(base, good)))
	if err != nil {
		t.Fatal(err)
	}
	s := openSender(t, c)
	rep, err := sendReport(s, "d-1")
	if err != nil || rep.Provider != "sg" || rep.ProviderMessageID != "W2SWv3KrQxOkpVfUEJnsuw" {
		t.Fatalf("send: %v (%q %q)", err, rep.Provider, rep.ProviderMessageID)
	}

	bad := `    smtp: {host: 127.0.0.1, port: 25}
    providers:
      - {kind: sparkpost, api_key: x}
      - {kind: ses, access_key_id: a, secret_access_key: b}
      - {kind: sendgrid, rate: fast}
      - {kind: mailgun, api_key: k, domain: mg.acme.test, lanes: -1}
      - {kind: postmark, server_token: t, name: mailgun}
      - {kind: resend, api_key: k, endpoint: "ftp://x"}`
	c, err = config.Parse("test.yaml", []byte(fmt.Sprintf(base, bad)))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := channels.NewRegistry(email.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	_, err = reg.Open(c, nil, nil)
	if err == nil {
		t.Fatal("a bad providers list opened")
	}
	for _, want := range []string{
		"channels.email.providers: set either smtp or providers",
		`channels.email.providers[0].kind: unknown provider kind "sparkpost"`,
		"channels.email.providers[1].region: must be set",
		"channels.email.providers[2].api_key: must be set",
		`channels.email.providers[2].rate: want a rate such as 14/s`,
		"channels.email.providers[3].lanes: must not be negative",
		`channels.email.providers[4].name: "mailgun" is the name of providers[3] too`,
		"channels.email.providers[5].endpoint: want an http(s) base URL",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// BenchmarkSendSES is BenchmarkSend through the ses provider's fake, which
// checks every request's signature: compare the two at the same lanes (8).
func BenchmarkSendSES(b *testing.B) {
	c := kindCases()[0]
	f := startFake(b, c.check, c.ok)
	entry := c.entry(f.srv.URL)
	entry.Lanes = 8
	s, err := email.New(&email.Config{From: "Acme <notify@acme.test>", Providers: []*email.Provider{entry},
		Timeout: config.Duration(30 * time.Second)}, nil, testNotifiers(), email.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	sendParallel(b, s)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.problems) > 0 {
		b.Fatalf("the fake refused requests: %q", f.problems[0])
	}
}
