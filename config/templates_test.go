package config

import (
	"encoding/json"
	"fmt"
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

func TestRenderInApp(t *testing.T) {
	t.Parallel()

	c := mustParse(t, templatesConfig)
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
	}
	for _, tc := range tests {
		t.Run(tc.notifier, func(t *testing.T) {
			t.Parallel()
			n, ok := c.Notifier(tc.notifier)
			if !ok {
				t.Fatalf("no notifier %q", tc.notifier)
			}
			title, body, url, err := n.RenderInApp(tc.params)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if title != tc.title || body != tc.body || url != tc.url {
				t.Errorf("got (%q, %q, %q), want (%q, %q, %q)", title, body, url, tc.title, tc.body, tc.url)
			}
		})
	}
}

func TestEmailForAndRender(t *testing.T) {
	t.Parallel()

	c := mustParse(t, templatesConfig)
	n := c.Notifiers["comment.created"]
	params := map[string]any{"author_name": "<Ada>", "post_title": "Hello", "excerpt": "a & b"}
	tests := []struct {
		locale, subject string
	}{
		{"", "New comment on Hello"},
		{"en", "New comment on Hello"},
		{"fr", "Nouveau commentaire sur Hello"},
		{"fr-CA", "Nouveau commentaire sur Hello"},
		{"FR_ca", "Nouveau commentaire sur Hello"},
		{"pt-BR", "Novo comentário em Hello"},
		{"pt_br", "Novo comentário em Hello"},
		{"pt", "New comment on Hello"},
	}
	for _, tc := range tests {
		t.Run(tc.locale, func(t *testing.T) {
			t.Parallel()
			subject, _, _, err := n.EmailFor(tc.locale).Render(params)
			if err != nil {
				t.Fatal(err)
			}
			if subject != tc.subject {
				t.Errorf("subject = %q, want %q", subject, tc.subject)
			}
		})
	}

	_, text, html, err := n.EmailFor("").Render(params)
	if err != nil {
		t.Fatal(err)
	}
	if text != "<Ada>: a & b" {
		t.Errorf("text = %q: text parts are not escaped", text)
	}
	if html != "<p>&lt;Ada&gt;: a &amp; b</p>" {
		t.Errorf("html = %q: params must be escaped", html)
	}
	_, text, html, err = n.EmailFor("fr").Render(params)
	if err != nil || text != "fr" || html != "" {
		t.Errorf("fr variant = (%q, %q, %v), want its own text and no html", text, html, err)
	}
	if c.Notifiers["no.channels"].EmailFor("fr") != nil {
		t.Error("EmailFor on a notifier without email is not nil")
	}

	s, err := n.RenderSlack(params)
	if err != nil || s != "<Ada> commented" {
		t.Errorf("RenderSlack = %q, %v", s, err)
	}
	if _, err := c.Notifiers["no.channels"].RenderSlack(nil); err == nil {
		t.Error("RenderSlack without a slack channel did not fail")
	}
}

func TestDigestRender(t *testing.T) {
	t.Parallel()

	item := func(title string) DigestItem {
		return DigestItem{Title: title, CreatedAt: time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)}
	}
	tests := []struct {
		name                string
		cfg                 string
		data                DigestData
		subject, text, html string
	}{
		{"defaults, all listed", "", DigestData{Items: []DigestItem{item("A"), item("B")}, Count: 2},
			"Your 2 new notifications", "- A\n- B\n", ""},
		{"defaults, more", "", DigestData{Items: []DigestItem{item("A")}, Count: 3, More: 2},
			"Your 3 new notifications", "- A\nand 2 more\n", ""},
		{"html and params", "digest:\n  html: '{{range .Items}}<i>{{.Title}}</i>{{.Params.x}}{{end}}'\n",
			DigestData{Items: []DigestItem{{Title: "<A>", Params: map[string]any{"x": "&"}}}, Count: 1},
			"Your 1 new notifications", "- <A>\n", "<i>&lt;A&gt;</i>&amp;"},
		{"missing param renders empty", "digest:\n  text: '{{range .Items}}[{{.Params.nope}}]{{end}}'\n",
			DigestData{Items: []DigestItem{{Params: map[string]any{}}}, Count: 1},
			"Your 1 new notifications", "[]", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := mustParse(t, tc.cfg)
			subject, text, html, err := c.Digest.Render(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if subject != tc.subject || text != tc.text || html != tc.html {
				t.Errorf("got (%q, %q, %q)\nwant (%q, %q, %q)", subject, text, html, tc.subject, tc.text, tc.html)
			}
		})
	}
}

func TestMissingKeysRenderEmpty(t *testing.T) {
	t.Parallel()

	// With a plain text/template, a missing key of a map[string]any prints
	// "<no value>" even under missingkey=zero.
	tests := []struct {
		src, want string
	}{
		{"[{{.nope}}]", "[]"},
		{"[{{.nope | printf \"%v\"}}]", "[<nil>]"},
		{"[{{$x := .nope}}{{$x}}]", "[]"},
		{"[{{if .nope}}yes{{else}}{{.nope}}no{{end}}]", "[no]"},
		{"[{{with .a}}{{.b}}{{else}}{{.c}}{{end}}]", "[]"},
		{"[{{range .l}}{{.x}}{{end}}]", "[]"},
		{"[{{.n}} {{.s}} {{.t}}]", "[1.5 s true]"},
		{"{{define \"t\"}}({{.nope}}){{end}}[{{template \"t\" .}}]", "[()]"},
	}
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			t.Parallel()
			tmpl, err := parseText("t.test", tc.src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := execText(tmpl, map[string]any{"n": 1.5, "s": "s", "t": true, "l": []any{map[string]any{}}})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
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
	n := c.Notifiers["n"]
	want := "129.50 many 12345678901234567890 3"
	for _, params := range []map[string]any{
		{"amount": 129.5, "count": 2.0, "big": json.Number("12345678901234567890"), "list": []any{3.0}},
		{"amount": json.Number("129.5"), "count": json.Number("2"), "big": json.Number("12345678901234567890"), "list": []any{json.Number("3")}},
	} {
		orig := fmt.Sprint(params)
		title, _, _, err := n.RenderInApp(params)
		if err != nil {
			t.Fatal(err)
		}
		if title != want {
			t.Errorf("title = %q, want %q (params %v)", title, want, params)
		}
		if fmt.Sprint(params) != orig {
			t.Errorf("RenderInApp changed the caller's params: %v", params)
		}
	}
}
