package config

import (
	"encoding/json"
	"fmt"
	"github.com/notifyd/notifyd/templates"
	"strings"
	"testing"
	"time"
)

const templatesConfig = `
notifiers:
  comment.created:
    channels:
      in_app:
        title: "{{.author_name}} commented on {{.post_title}}"
        body: "{{with .excerpt}}“{{.}}”{{end}}"
        url: "{{.url}}"
      email:
        subject: "New comment on {{.post_title}}"
        text: "{{.author_name}}: {{.excerpt}}"
        html: "<p>{{.author_name}}: {{.excerpt}}</p>"
        locales:
          fr: {subject: "Nouveau commentaire sur {{.post_title}}", text: "fr"}
          pt-BR: {subject: "Novo comentário em {{.post_title}}", text: "pt-BR"}
      slack:
        webhook_url: https://hooks.slack.test/x
        text: "{{.author_name}} commented"
  title.only:
    channels:
      in_app: {title: "{{range .tags}}#{{.}} {{end}}"}
  no.channels: {}
`

func TestDigestRender(t *testing.T) {
	t.Parallel()

	item := func(title string) templates.DigestItem {
		return templates.DigestItem{Title: title, CreatedAt: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}
	}
	tests := []struct {
		name                string
		cfg                 string
		data                templates.DigestData
		subject, text, html string
	}{
		{"defaults, all listed", "", templates.DigestData{Items: []templates.DigestItem{item("A"), item("B")}, Count: 2},
			"Your 2 new notifications", "- A\n- B\n", ""},
		{"defaults, more", "", templates.DigestData{Items: []templates.DigestItem{item("A")}, Count: 3, More: 2},
			"Your 3 new notifications", "- A\nand 2 more\n", ""},
		{"html and params", "digest:\n  html: '{{range .Items}}<i>{{.Title}}</i>{{.Params.x}}{{end}}'\n",
			templates.DigestData{Items: []templates.DigestItem{{Title: "<A>", Params: map[string]any{"x": "&"}}}, Count: 1},
			"Your 1 new notifications", "- <A>\n", "<i>&lt;A&gt;</i>&amp;"},
		{"missing param renders empty", "digest:\n  text: '{{range .Items}}[{{.Params.nope}}]{{end}}'\n",
			templates.DigestData{Items: []templates.DigestItem{{Params: map[string]any{}}}, Count: 1},
			"Your 1 new notifications", "[]", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := mustParse(t, tc.cfg)
			subject, text, html, err := templates.RenderDigest(c.Digest.SubjectTmpl, c.Digest.TextTmpl, c.Digest.HTMLTmpl, tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if subject != tc.subject || text != tc.text || html != tc.html {
				t.Errorf("got (%q, %q, %q)\nwant (%q, %q, %q)", subject, text, html, tc.subject, tc.text, tc.html)
			}
		})
	}
}

func TestReasonRank(t *testing.T) {
	t.Parallel()

	tests := []struct {
		reasons string // YAML list, "" for the default
		reason  string
		want    int
	}{
		{"", "assigned", 0},
		{"", "author", 1},
		{"", "mentioned", 2},
		{"", "subscribed", 3},
		{"", "role-default", 4},
		{"", "watching", 5},
		{"", "", 5},
		{"[owner, watcher]", "watcher", 1},
		{"[owner, watcher]", "assigned", 2},
	}
	for _, tc := range tests {
		t.Run(tc.reasons+"/"+tc.reason, func(t *testing.T) {
			t.Parallel()
			c := Default()
			if tc.reasons != "" {
				c = mustParse(t, "reasons: "+tc.reasons+"\n")
			}
			if got := c.ReasonRank(tc.reason); got != tc.want {
				t.Errorf("ReasonRank(%q) = %d, want %d", tc.reason, got, tc.want)
			}
		})
	}
}

func TestNotifierLookup(t *testing.T) {
	t.Parallel()

	c := mustParse(t, templatesConfig)
	tests := []struct {
		name string
		ok   bool
	}{
		{"comment.created", true},
		{"no.channels", true},
		{"comment", false},
		{"", false},
	}
	for _, tc := range tests {
		n, ok := c.Notifier(tc.name)
		if ok != tc.ok || (ok && n.Name != tc.name) {
			t.Errorf("Notifier(%q) = %v, %v", tc.name, n, ok)
		}
	}
	if got := strings.Join(c.NotifierNames(), ","); got != "comment.created,no.channels,title.only" {
		t.Errorf("NotifierNames = %s", got)
	}
}

// TestNumbersRenderAlike renders a template the way a channel does
// (Problems.Text, templates.RenderText): json.Number params read as float64, except an
// integer a float64 cannot hold, and the caller's params are left alone. The
// in_app channel's test renders the same title through the inbox.
func TestNumbersRenderAlike(t *testing.T) {
	t.Parallel()

	c := mustParse(t, `
notifiers:
  n:
    example: {amount: 1, count: 2, big: 3, list: [4]}
    channels:
      in_app:
        title: '{{printf "%.2f" .amount}} {{if gt .count 1.0}}many{{end}} {{.big}} {{index .list 0}}'
`)
	sec := c.Notifiers["n"].Channels["in_app"].Section
	src, _ := sec.Value("title")
	p := c.NewProblems()
	tmpl := p.Text(sec, "title", src)
	p.RenderCheck(sec, "title", tmpl, templates.Params(c.Notifiers["n"].ExampleParams()))
	if err := p.Err(); err != nil || tmpl == nil {
		t.Fatalf("title: %v", err)
	}
	want := "129.50 many 12345678901234567890 3"
	for _, params := range []map[string]any{
		{"amount": 129.5, "count": 2.0, "big": json.Number("12345678901234567890"), "list": []any{3.0}},
		{"amount": json.Number("129.5"), "count": json.Number("2"), "big": json.Number("12345678901234567890"), "list": []any{json.Number("3")}},
	} {
		orig := fmt.Sprint(params)
		title, err := templates.RenderText(tmpl, params)
		if err != nil {
			t.Fatal(err)
		}
		if title != want {
			t.Errorf("title = %q, want %q (params %v)", title, want, params)
		}
		if fmt.Sprint(params) != orig {
			t.Errorf("RenderText changed the caller's params: %v", params)
		}
	}
}
