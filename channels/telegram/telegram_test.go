package telegram_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/telegram"
	"github.com/notifyd/notifyd/config"
)

const token = "123456:ABC-DEF1234ghIkl-zyx57W2v1u123ew11"

// botAPI is a local Bot API: it checks each request as Telegram does (POST
// to /bot<token>/sendMessage, JSON with chat_id, text and parse_mode HTML)
// and answers with the next queued body, else a documented success.
type botAPI struct {
	*httptest.Server
	mu       sync.Mutex
	bodies   []map[string]any
	problems []string
	answers  []botAnswer
}

type botAnswer struct {
	status int
	body   string
}

func newBotAPI(t *testing.T) *botAPI {
	t.Helper()
	b := &botAPI{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var m map[string]any
		err := json.Unmarshal(raw, &m)
		b.mu.Lock()
		defer b.mu.Unlock()
		switch {
		case r.Method != http.MethodPost || r.URL.Path != "/bot"+token+"/sendMessage":
			b.problems = append(b.problems, r.Method+" "+r.URL.Path)
		case r.Header.Get("Content-Type") != "application/json" || err != nil:
			b.problems = append(b.problems, "body is not JSON")
		case m["chat_id"] == nil || m["text"] == nil || m["parse_mode"] != "HTML":
			b.problems = append(b.problems, "fields: "+string(raw))
		}
		b.bodies = append(b.bodies, m)
		a := botAnswer{200, `{"ok":true,"result":{"message_id":42,"from":{"id":123456,"is_bot":true,"first_name":"Acme"},"chat":{"id":987654321,"first_name":"Ann","type":"private"},"date":1700000000,"text":"x"}}`}
		if len(b.answers) > 0 {
			a, b.answers = b.answers[0], b.answers[1:]
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *botAPI) last(t *testing.T) map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.problems) > 0 {
		t.Fatalf("the Bot API refused requests: %q", b.problems)
	}
	if len(b.bodies) == 0 {
		t.Fatal("no request")
	}
	return b.bodies[len(b.bodies)-1]
}

func setup(t *testing.T) (*botAPI, *telegram.Sender) {
	t.Helper()
	b := newBotAPI(t)
	s, err := telegram.New(&telegram.Config{BotToken: token, APIURL: b.URL},
		map[string]*telegram.Templates{"comment.created": {Text: `<b>{{.author}}</b> commented: {{.body}}`}}, telegram.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b, s
}

func message(chatID any) channels.Message {
	return channels.Message{DeliveryID: "d-1", Notifier: "comment.created",
		Recipient: &channels.Recipient{ID: "u-ann", Data: map[string]any{"telegram_chat_id": chatID}},
		Params:    map[string]any{"author": "Bob & <Eve>", "body": `<a href="x">click</a>`}}
}

func TestSendEscapesParamsAndRecordsMessageID(t *testing.T) {
	t.Parallel()
	b, s := setup(t)
	ctx, rep := channels.WithReport(context.Background())
	if err := s.Send(ctx, message(float64(987654321))); err != nil {
		t.Fatal(err)
	}
	m := b.last(t)
	if m["chat_id"] != float64(987654321) {
		t.Errorf("chat_id = %v", m["chat_id"])
	}
	if want := `<b>Bob &amp; &lt;Eve&gt;</b> commented: &lt;a href=&#34;x&#34;&gt;click&lt;/a&gt;`; m["text"] != want {
		t.Errorf("text = %q, want %q", m["text"], want)
	}
	if rep.Provider != "telegram" || rep.ProviderMessageID != "42" {
		t.Errorf("report = %q %q", rep.Provider, rep.ProviderMessageID)
	}
	// A chat id stored as a string, and a channel's @username.
	for _, id := range []any{"987654321", "@acme_news"} {
		if err := s.Send(context.Background(), message(id)); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.last(t)["chat_id"]; got != "@acme_news" {
		t.Errorf("chat_id = %v", got)
	}
}

func TestErrorClasses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		a     botAnswer
		kind  channels.Kind
		after time.Duration
	}{
		{"429 retry_after", botAnswer{429, `{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 7","parameters":{"retry_after":7}}`}, channels.KindRateLimited, 7 * time.Second},
		{"400 chat not found", botAnswer{400, `{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}`}, channels.KindPermanent, 0},
		{"400 parse entities", botAnswer{400, `{"ok":false,"error_code":400,"description":"Bad Request: can't parse entities: Unsupported start tag \"blink\" at byte offset 0"}`}, channels.KindPermanent, 0},
		{"403 blocked", botAnswer{403, `{"ok":false,"error_code":403,"description":"Forbidden: bot was blocked by the user"}`}, channels.KindPermanent, 0},
		{"401 bad token", botAnswer{401, `{"ok":false,"error_code":401,"description":"Unauthorized"}`}, channels.KindTemporary, 0},
		{"502", botAnswer{502, `{"ok":false,"error_code":502,"description":"Bad Gateway"}`}, channels.KindTemporary, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b, s := setup(t)
			b.mu.Lock()
			b.answers = []botAnswer{c.a}
			b.mu.Unlock()
			err := s.Send(context.Background(), message(float64(1)))
			kind, after := channels.Classify(err)
			if err == nil || kind != c.kind || after != c.after {
				t.Errorf("%v: kind %v after %v, want %v %v", err, kind, after, c.kind, c.after)
			}
			if err != nil && strings.Contains(err.Error(), token) {
				t.Errorf("the error names the bot token: %v", err)
			}
			b.last(t)
		})
	}
}

func TestNoChatID(t *testing.T) {
	t.Parallel()
	_, s := setup(t)
	r := channels.Recipient{ID: "u", Data: map[string]any{"other": 1}}
	if err := s.Addressable("comment.created", r); err == nil || !strings.Contains(err.Error(), "telegram_chat_id") {
		t.Errorf("Addressable = %v", err)
	}
	if err := s.Addressable("comment.created", channels.Recipient{ID: "u"}); err != nil {
		t.Errorf("Addressable without data (the fan-out's view) = %v, want nil", err)
	}
	msg := message(nil)
	msg.Recipient.Data = nil
	if kind, _ := channels.Classify(s.Send(context.Background(), msg)); kind != channels.KindPermanent {
		t.Errorf("send without a chat id: kind %v", kind)
	}
}

func TestServerDownIsTemporary(t *testing.T) {
	t.Parallel()
	b, s := setup(t)
	b.Close()
	err := s.Send(context.Background(), message(float64(1)))
	if kind, _ := channels.Classify(err); kind != channels.KindTemporary || strings.Contains(err.Error(), token) {
		t.Errorf("kind %v: %v", kind, err)
	}
}

func TestLoadedConfig(t *testing.T) {
	t.Parallel()
	b := newBotAPI(t)
	c, err := config.Parse("test.yaml", []byte(`
channels:
  telegram:
    bot_token: "`+token+`"
    api_url: `+b.URL+`
notifiers:
  comment.created:
    channels:
      telegram:
        text: "<b>{{.author}}</b>"
`))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := channels.NewRegistry(telegram.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	set, err := reg.Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := set.Channels[telegram.Name].(*telegram.Sender)
	if err := s.Send(context.Background(), message(float64(5))); err != nil {
		t.Fatal(err)
	}
	if got := b.last(t)["text"]; got != "<b>Bob &amp; &lt;Eve&gt;</b>" {
		t.Errorf("text = %q", got)
	}

	c, err = config.Parse("test.yaml", []byte("channels:\n  telegram:\n    timeout: 0s\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Open(c, nil, nil); err == nil || !strings.Contains(err.Error(), "channels.telegram.bot_token: must be set") {
		t.Errorf("open without a token: %v", err)
	}
}
