package discord_test

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
	"github.com/notifyd/notifyd/channels/discord"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
	"github.com/notifyd/notifyd/config"
)

// receiver is a local Discord webhook: it checks each request as Discord
// does (POST, JSON with content and allowed_mentions, the webhook's path)
// and keeps the bodies; a queued status is answered instead.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	bodies   []map[string]any
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
			w.Header().Set("Retry-After", "3")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `{"message": "You are being rate limited.", "retry_after": 3.0, "global": false}`)
			return
		}
		w.WriteHeader(status)
		return
	}
	var body map[string]any
	raw, _ := io.ReadAll(r.Body)
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	switch {
	case r.Method != http.MethodPost || r.URL.Path != "/api/webhooks/123/tok":
		rc.problems = append(rc.problems, r.Method+" "+r.URL.Path)
	case r.Header.Get("Content-Type") != "application/json":
		rc.problems = append(rc.problems, "Content-Type "+r.Header.Get("Content-Type"))
	case dec.Decode(&body) != nil:
		rc.problems = append(rc.problems, "body is not JSON: "+string(raw))
	default:
		rc.bodies = append(rc.bodies, body)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.WriteHeader(http.StatusBadRequest)
}

func (rc *receiver) got(t *testing.T) []map[string]any {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.problems) > 0 {
		t.Fatalf("the webhook refused: %v", rc.problems)
	}
	return append([]map[string]any(nil), rc.bodies...)
}

func sender(t *testing.T, url, text string) *discord.Sender {
	t.Helper()
	s, err := discord.New(&discord.Config{AllowPrivate: true}, map[string]*discord.Templates{
		"comment.created": {WebhookURL: url + "/api/webhooks/123/tok", Text: text},
	}, discord.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func msg(params map[string]any) channels.Message {
	return channels.Message{DeliveryID: "d-1", NotificationID: "n-1", Notifier: "comment.created", Key: "k", Params: params}
}

func TestSendBulkPostsContentWithoutMentions(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	s := sender(t, rc.URL, "**{{.author}}** commented on <{{.url}}|{{.post}}>")
	if !s.Configured("comment.created") || s.Configured("other") {
		t.Fatal("Configured is wrong")
	}
	if err := s.SendBulk(context.Background(), msg(map[string]any{"author": "Ada", "post": "Hello", "url": "https://x.test/p"})); err != nil {
		t.Fatal(err)
	}
	bodies := rc.got(t)
	if len(bodies) != 1 {
		t.Fatalf("got %d posts", len(bodies))
	}
	b := bodies[0]
	if b["content"] != `**Ada** commented on <https://x.test/p|Hello>` {
		t.Errorf("content = %q", b["content"])
	}
	am, _ := b["allowed_mentions"].(map[string]any)
	if parse, ok := am["parse"].([]any); !ok || len(parse) != 0 {
		t.Errorf("allowed_mentions = %v, want {\"parse\": []}", b["allowed_mentions"])
	}
	if target := s.Target(msg(nil)); target != strings.ToLower(rc.URL) {
		t.Errorf("Target = %q: the host only, never the token", target)
	}
}

// A param cannot add markdown or mention anybody: every character Discord
// gives a meaning gets a backslash, and the template's own markup stays.
func TestParamsCannotAddDiscordMarkup(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	s := sender(t, rc.URL, "**{{.author}}**: {{.body}}")
	hostile := "@everyone *bold* _it_ ~~s~~ ||spoiler|| > quote `code` [link](https://evil.test) <@123> # head - item \\"
	if err := s.SendBulk(context.Background(), msg(map[string]any{"author": "Eve", "body": hostile})); err != nil {
		t.Fatal(err)
	}
	got := rc.got(t)[0]["content"].(string)
	want := `**Eve**: \@everyone \*bold\* \_it\_ \~\~s\~\~ \|\|spoiler\|\| \> quote ` + "\\`code\\`" +
		` \[link\](https://evil.test) \<\@123\> \# head \- item \\`
	if got != want {
		t.Errorf("content =\n%s\nwant\n%s", got, want)
	}
	// Nested params are escaped too.
	if err := s.SendBulk(context.Background(), msg(map[string]any{"author": map[string]any{"x": "*"}, "body": []any{"_"}})); err != nil {
		t.Fatal(err)
	}
	if got := rc.got(t)[1]["content"].(string); got != `**map[x:\*]**: [\_]` {
		t.Errorf("nested content = %q", got)
	}
}

func TestLongContentIsCut(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	s := sender(t, rc.URL, "{{.body}}")
	if err := s.SendBulk(context.Background(), msg(map[string]any{"body": strings.Repeat("é", 3000)})); err != nil {
		t.Fatal(err)
	}
	got := rc.got(t)[0]["content"].(string)
	if n := len([]rune(got)); n != discord.MaxContent || !strings.HasSuffix(got, "…") {
		t.Errorf("content of %d characters, want %d ending with …", n, discord.MaxContent)
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		kind   channels.Kind
		after  time.Duration
	}{
		{429, channels.KindRateLimited, 3 * time.Second},
		{500, channels.KindTemporary, 0},
		{404, channels.KindPermanent, 0}, // the webhook was deleted
		{410, channels.KindGone, 0},
		{400, channels.KindPermanent, 0},
	}
	for _, tt := range tests {
		rc := newReceiver(t)
		rc.answers = []int{tt.status}
		s := sender(t, rc.URL, "hi")
		err := s.SendBulk(context.Background(), msg(nil))
		if kind, after := channels.Classify(err); err == nil || kind != tt.kind || after != tt.after {
			t.Errorf("HTTP %d: %v (%v after %s), want %v after %s", tt.status, err, kind, after, tt.kind, tt.after)
		}
		if err != nil && strings.Contains(err.Error(), "/api/webhooks") {
			t.Errorf("the error quotes the webhook's path (a credential): %v", err)
		}
	}
}

func TestPrivateDestinationsAreRefused(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	s, err := discord.New(nil, map[string]*discord.Templates{"comment.created": {WebhookURL: rc.URL + "/api/webhooks/123/tok", Text: "hi"}},
		discord.Options{})
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
	reg, err := channels.NewRegistry(discord.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	bad := `channels:
  discord: {timeout: 0s}
notifiers:
  n:
    channels:
      discord: {webhook_url: "not a url", text: "{{.x"}
  m:
    channels:
      discord: {text: hi}
`
	_, err = config.ParseWith("test.yaml", []byte(bad), reg.Check)
	for _, want := range []string{
		"test.yaml:2: channels.discord.timeout:",
		"test.yaml:6: notifiers.n.channels.discord.webhook_url:",
		"test.yaml:6: notifiers.n.channels.discord.text: invalid template",
		"test.yaml:9: notifiers.m.channels.discord.webhook_url: must be set",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("errors do not contain %q:\n%v", want, err)
		}
	}
	good := "notifiers:\n  n:\n    channels:\n      discord: {webhook_url: \"https://discord.test/api/webhooks/1/t\", text: \"{{.x}}\"}\n"
	cfg, err := config.ParseWith("test.yaml", []byte(good), reg.Check)
	if err != nil {
		t.Fatal(err)
	}
	set, err := reg.Open(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if b, ok := set.Bulk[discord.Name]; !ok || !b.Configured("n") {
		t.Error("discord is not configured for n without a channels section")
	}
	parts, err := set.Bulk[discord.Name].(channels.Previewer).Preview("n", map[string]any{"x": "*hi*"}, channels.Recipient{})
	if err != nil || len(parts) != 1 || parts[0].Value != `\*hi\*` {
		t.Errorf("Preview = %v, %v", parts, err)
	}
}
