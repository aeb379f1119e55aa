package teams_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
	"github.com/notifyd/notifyd/channels/teams"
	"github.com/notifyd/notifyd/config"
)

// card is what a Teams workflow webhook accepts, decoded strictly: a
// message whose one attachment is an Adaptive Card of TextBlocks.
type card struct {
	Type        string `json:"type"`
	Attachments []struct {
		ContentType string `json:"contentType"`
		Content     struct {
			Type    string `json:"type"`
			Version string `json:"version"`
			Body    []struct {
				Type   string `json:"type"`
				Text   string `json:"text"`
				Weight string `json:"weight"`
				Size   string `json:"size"`
				Wrap   bool   `json:"wrap"`
			} `json:"body"`
		} `json:"content"`
	} `json:"attachments"`
}

// receiver is a local Teams workflow webhook: it checks the card's shape
// and answers 202 as a workflow does; a queued status is answered instead.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	cards    []card
	problems []string
	answers  []int
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.answers) > 0 {
		status := rc.answers[0]
		rc.answers = rc.answers[1:]
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "9")
		}
		w.WriteHeader(status)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	var c card
	problem := ""
	switch {
	case r.Method != http.MethodPost || r.URL.Path != "/workflows/abc/triggers/manual/paths/invoke" || r.URL.Query().Get("sig") != "s3cret":
		problem = r.Method + " " + r.URL.String()
	case r.Header.Get("Content-Type") != "application/json":
		problem = "Content-Type " + r.Header.Get("Content-Type")
	case dec.Decode(&c) != nil:
		problem = "not a card: " + string(raw)
	case c.Type != "message" || len(c.Attachments) != 1:
		problem = "not a message with one attachment: " + string(raw)
	case c.Attachments[0].ContentType != "application/vnd.microsoft.card.adaptive" || c.Attachments[0].Content.Type != "AdaptiveCard" ||
		c.Attachments[0].Content.Version == "":
		problem = "not an Adaptive Card: " + string(raw)
	}
	for _, b := range c.Attachments {
		for _, tb := range b.Content.Body {
			if tb.Type != "TextBlock" || !tb.Wrap {
				problem = "not a wrapping TextBlock: " + string(raw)
			}
		}
	}
	if problem != "" {
		rc.problems = append(rc.problems, problem)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	rc.cards = append(rc.cards, c)
	w.WriteHeader(http.StatusAccepted)
}

func (rc *receiver) got(t *testing.T) []card {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.problems) > 0 {
		t.Fatalf("the webhook refused: %v", rc.problems)
	}
	return append([]card(nil), rc.cards...)
}

func webhook(rc *receiver) string {
	return rc.URL + "/workflows/abc/triggers/manual/paths/invoke?api-version=1&sig=s3cret"
}

func sender(t *testing.T, rc *receiver, title, text string) *teams.Sender {
	t.Helper()
	s, err := teams.New(&teams.Config{AllowPrivate: true}, map[string]*teams.Templates{
		"deploy.finished": {WebhookURL: webhook(rc), Title: title, Text: text},
	}, teams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func msg(params map[string]any) channels.Message {
	return channels.Message{DeliveryID: "d-1", NotificationID: "n-1", Notifier: "deploy.finished", Key: "k", Params: params}
}

func TestSendBulkPostsAnAdaptiveCard(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	s := sender(t, rc, "Deploy of {{.app}}", "**{{.app}}** {{.version}} is live: [open]({{.url}})")
	if err := s.SendBulk(context.Background(), msg(map[string]any{"app": "shop", "version": "v2", "url": "https://shop.test"})); err != nil {
		t.Fatal(err)
	}
	cards := rc.got(t)
	if len(cards) != 1 {
		t.Fatalf("got %d cards", len(cards))
	}
	body := cards[0].Attachments[0].Content.Body
	if len(body) != 2 || body[0].Text != "Deploy of shop" || body[0].Weight != "Bolder" ||
		body[1].Text != "**shop** v2 is live: [open](https://shop.test)" {
		t.Errorf("card body = %+v", body)
	}
	if target := s.Target(msg(nil)); target != strings.ToLower(rc.URL) {
		t.Errorf("Target = %q: the host only, never the signature", target)
	}
}

func TestNoTitleBlockWithoutTitle(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	s := sender(t, rc, "", "plain")
	if err := s.SendBulk(context.Background(), msg(nil)); err != nil {
		t.Fatal(err)
	}
	if body := rc.got(t)[0].Attachments[0].Content.Body; len(body) != 1 || body[0].Text != "plain" {
		t.Errorf("card body = %+v", body)
	}
}

// A param cannot add markdown or call a date function.
func TestParamsCannotAddTeamsMarkup(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	s := sender(t, rc, "{{.title}}", "**{{.who}}**: {{.body}}")
	hostile := "*bold* _it_ [phish](https://evil.test) # head - item + item > quote `code` ~~s~~ | {{DATE(2017-02-14T06:08:39Z, SHORT)}} \\"
	if err := s.SendBulk(context.Background(), msg(map[string]any{"title": "**big**", "who": "Eve", "body": hostile})); err != nil {
		t.Fatal(err)
	}
	body := rc.got(t)[0].Attachments[0].Content.Body
	if body[0].Text != `\*\*big\*\*` {
		t.Errorf("title = %q", body[0].Text)
	}
	want := `**Eve**: \*bold\* \_it\_ \[phish\]\(https://evil.test\) \# head \- item \+ item \> quote ` + "\\`code\\`" +
		` \~\~s\~\~ \| {` + "\u200b" + `{DATE\(2017\-02\-14T06:08:39Z, SHORT\)}} \\`
	if body[1].Text != want {
		t.Errorf("text =\n%q\nwant\n%q", body[1].Text, want)
	}
	if strings.Contains(body[1].Text, "{{") {
		t.Error("a param's {{ reached the card")
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		kind   channels.Kind
		after  time.Duration
	}{
		{429, channels.KindRateLimited, 9 * time.Second},
		{502, channels.KindTemporary, 0},
		{400, channels.KindPermanent, 0},
		{410, channels.KindGone, 0},
	}
	for _, tt := range tests {
		rc := newReceiver(t)
		rc.answers = []int{tt.status}
		s := sender(t, rc, "", "hi")
		err := s.SendBulk(context.Background(), msg(nil))
		if kind, after := channels.Classify(err); err == nil || kind != tt.kind || after != tt.after {
			t.Errorf("HTTP %d: %v (%v after %s), want %v after %s", tt.status, err, kind, after, tt.kind, tt.after)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error quotes the webhook's signature: %v", err)
		}
	}
}

func TestPrivateDestinationsAreRefused(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	s, err := teams.New(nil, map[string]*teams.Templates{"deploy.finished": {WebhookURL: webhook(rc), Text: "hi"}}, teams.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.SendBulk(context.Background(), msg(nil))
	if kind, _ := channels.Classify(err); err == nil || kind != channels.KindPermanent || !errors.Is(err, safehttp.ErrForbiddenAddress) {
		t.Errorf("SendBulk to 127.0.0.1 = %v, want refused by the SSRF guard", err)
	}
	if len(rc.got(t)) != 0 {
		t.Error("the private destination was reached")
	}
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	reg, err := channels.NewRegistry(teams.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	bad := `notifiers:
  n:
    channels:
      teams: {webhook_url: "ftp://x", title: "{{.x", text: ""}
`
	_, err = config.ParseWith("test.yaml", []byte(bad), reg.Check)
	for _, want := range []string{
		"test.yaml:4: notifiers.n.channels.teams.webhook_url:",
		"test.yaml:4: notifiers.n.channels.teams.title: invalid template",
		"test.yaml:4: notifiers.n.channels.teams.text: must be set",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("errors do not contain %q:\n%v", want, err)
		}
	}
	if _, err := teams.New(nil, map[string]*teams.Templates{"n": {WebhookURL: "https://x.test/h", Text: "{{"}}, teams.Options{}); err == nil ||
		!strings.Contains(err.Error(), "notifiers.n.channels.teams.text") {
		t.Errorf("New with a bad template = %v", err)
	}
}
