package inapp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/inapp"
	"github.com/notifyd/notifyd/config"
)

const templatesConfig = `
notifiers:
  comment.created:
    channels:
      in_app:
        title: "{{.author_name}} commented on {{.post_title}}"
        body: "{{with .excerpt}}“{{.}}”{{end}}"
        url: "{{.url}}"
  title.only:
    channels:
      in_app: {title: "{{range .tags}}#{{.}} {{end}}"}
  no.channels: {}
`

// openInbox opens the inbox on src, as the daemon does.
func openInbox(t *testing.T, src string) *inapp.Inbox {
	t.Helper()
	reg, err := channels.NewRegistry(inapp.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.ParseWith("test.yaml", []byte(src), reg.Check)
	if err != nil {
		t.Fatal(err)
	}
	set, err := reg.Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = set.Close() })
	in, ok := set.Inbox.(*inapp.Inbox)
	if ch, _ := set.Channels[inapp.Name].(*inapp.Inbox); !ok || ch != in {
		t.Fatalf("inbox = %T, channels = %v", set.Inbox, set.Channels)
	}
	return in
}

func TestRenderInbox(t *testing.T) {
	t.Parallel()

	in := openInbox(t, templatesConfig)
	tests := []struct {
		notifier              string
		params                map[string]any
		title, body, url, err string
	}{
		{"comment.created", map[string]any{"author_name": "Ada", "post_title": "Hello", "excerpt": "Nice", "url": "https://app.test/9"},
			"Ada commented on Hello", "“Nice”", "https://app.test/9", ""},
		{"comment.created", map[string]any{"author_name": "Ada", "post_title": "Hello"},
			"Ada commented on Hello", "", "", ""},
		{"comment.created", nil, " commented on ", "", "", ""},
		{"comment.created", map[string]any{"author_name": "<b>Ada</b>", "post_title": 3.0},
			"<b>Ada</b> commented on 3", "", "", ""},
		{"title.only", map[string]any{"tags": []any{"a", "b"}}, "#a #b ", "", "", ""},
		{"title.only", map[string]any{"tags": 1.0}, "", "", "", "range can't iterate over 1"},
		{"no.channels", nil, "", "", "", `notifier "no.channels" has no in_app channel`},
		{"not.configured", nil, "", "", "", `notifier "not.configured" has no in_app channel`},
	}
	for _, tc := range tests {
		t.Run(tc.notifier, func(t *testing.T) {
			t.Parallel()
			it, err := in.RenderInbox(tc.notifier, tc.params)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if it.Title != tc.title || it.Body != tc.body || it.URL != tc.url {
				t.Errorf("got (%q, %q, %q), want (%q, %q, %q)", it.Title, it.Body, it.URL, tc.title, tc.body, tc.url)
			}
		})
	}
}

func TestNumbersRenderAlike(t *testing.T) {
	t.Parallel()

	in := openInbox(t, `
notifiers:
  n:
    example: {amount: 1, count: 2, big: 3, list: [4]}
    channels:
      in_app:
        title: '{{printf "%.2f" .amount}} {{if gt .count 1.0}}many{{end}} {{.big}} {{index .list 0}}'
`)
	want := "129.50 many 12345678901234567890 3"
	for _, params := range []map[string]any{
		{"amount": 129.5, "count": 2.0, "big": json.Number("12345678901234567890"), "list": []any{3.0}},
		{"amount": json.Number("129.5"), "count": json.Number("2"), "big": json.Number("12345678901234567890"), "list": []any{json.Number("3")}},
	} {
		orig := fmt.Sprint(params)
		it, err := in.RenderInbox("n", params)
		if err != nil {
			t.Fatal(err)
		}
		if it.Title != want {
			t.Errorf("title = %q, want %q (params %v)", it.Title, want, params)
		}
		if fmt.Sprint(params) != orig {
			t.Errorf("RenderInbox changed the caller's params: %v", params)
		}
	}
}

// TestNothingToSend: the inbox needs no address and is never sent through;
// its items are written by the fan-out.
func TestNothingToSend(t *testing.T) {
	t.Parallel()

	in := openInbox(t, templatesConfig)
	if in.Name() != "in_app" {
		t.Errorf("Name = %q", in.Name())
	}
	if err := in.Addressable("comment.created", channels.Recipient{ID: "u"}); err != nil {
		t.Errorf("Addressable = %v, want nil for a recipient without any address", err)
	}
	err := in.Send(context.Background(), channels.Message{DeliveryID: "d-1"})
	if k, _ := channels.Classify(err); err == nil || k != channels.KindPermanent {
		t.Errorf("Send = %v (kind %v), want a permanent error", err, k)
	}
}
