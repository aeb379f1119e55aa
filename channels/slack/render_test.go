package slack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/slack"
	"github.com/notifyd/notifyd/config"
)

// TestRenderThroughLoadedConfig posts a loaded notifier's text through the
// channel the registry opens: params are not escaped (Slack's mrkdwn is
// not HTML), and a notifier without a slack section has nothing to post.
func TestRenderThroughLoadedConfig(t *testing.T) {
	t.Parallel()

	var mu sync.Mutex
	var texts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Text string `json:"text"`
		}
		data, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(data, &body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		texts = append(texts, body.Text)
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)

	reg, err := channels.NewRegistry(slack.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`
channels:
  slack: {allow_private: true}
notifiers:
  comment.created:
    channels:
      slack:
        webhook_url: %s/services/T/B/X
        text: "{{.author_name}} commented{{with .missing}} {{.}}{{end}} {{.nope}}"
  no.channels: {}
`, srv.URL)
	c, err := config.ParseWith("test.yaml", []byte(src), reg.Check)
	if err != nil {
		t.Fatal(err)
	}
	set, err := reg.Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	s, ok := set.Bulk[slack.Name]
	if !ok {
		t.Fatalf("slack not opened: %v", set.Bulk)
	}
	if !s.Configured("comment.created") || s.Configured("no.channels") {
		t.Errorf("Configured: comment.created %t, no.channels %t", s.Configured("comment.created"), s.Configured("no.channels"))
	}

	ctx := context.Background()
	params := map[string]any{"author_name": "<Ada>", "post_title": "Hello", "excerpt": "a & b"}
	if err := s.SendBulk(ctx, channels.Message{DeliveryID: "d-1", Notifier: "comment.created", Params: params}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := append([]string(nil), texts...)
	mu.Unlock()
	// Params are escaped for Slack: "<Ada>" cannot become markup.
	if len(got) != 1 || got[0] != "&lt;Ada&gt; commented " {
		t.Errorf("posted %q, want [\"&lt;Ada&gt; commented \"]", got)
	}

	err = s.SendBulk(ctx, channels.Message{DeliveryID: "d-2", Notifier: "no.channels"})
	if k, _ := channels.Classify(err); err == nil || k != channels.KindPermanent {
		t.Errorf("SendBulk without a slack section = %v (kind %v), want a permanent error", err, k)
	}
}
