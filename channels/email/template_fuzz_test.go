package email

import (
	"encoding/json"
	"html"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/templates"
)

// fuzzTemplateConfig puts params (and the recipient's name, which comes from
// a profile the application may fill from user input) into every HTML
// context a template author is likely to use: text, quoted and unquoted
// attributes, a link, a style attribute, a title. None of the templates has
// a script element or a range, so the number of '<' in the html part is the
// number in the template source: a param can never add a tag.
const fuzzTemplateConfig = `
channels:
  email: {from: "Fuzz <fuzz@fuzz.test>", smtp: {host: 127.0.0.1, port: 25}}
digest:
  subject: "{{.Count}} new: {{range .Items}}{{.Title}} {{end}}"
  text: "{{range .Items}}- {{.Title}}\n{{end}}"
  html: '<ul>{{range .Items}}<li><a href="{{.URL}}" title="{{.Title}}">{{.Title}}</a> {{.Params.body}}</li>{{end}}</ul>'
notifiers:
  comment.created:
    channels:
      email:
        subject: "{{.author}} on {{.title}}"
        text: "{{.author}} wrote: {{.body}} ({{.url}})"
        html: >-
          <html><head><title>{{.title}}</title></head><body style="color: {{.color}}">
          <p class="{{.class}}" data-x={{.author}}>Hi {{recipient.Name}}, {{.author}} wrote:</p>
          <blockquote>{{.body}}</blockquote><a href="{{.url}}">open</a> <a href='/p/{{.title}}?q={{.body}}'>permalink</a>
          <img alt="{{with .nested}}{{.deep}}{{end}}" src="{{.img}}"></body></html>
`

// templateSource is the html template above, to count its '<'.
var templateSource = func() string {
	i := strings.Index(fuzzTemplateConfig, "html: >-")
	j := strings.Index(fuzzTemplateConfig[i:], "</html>")
	return fuzzTemplateConfig[i : i+j+len("</html>")]
}()

var hrefRE = regexp.MustCompile(`(?i)\b(?:href|src)\s*=\s*(?:"([^"]*)"|'([^']*)')`)

// FuzzEmailTemplates renders a notifier's email, and a digest, with hostile
// params and recipient names. The html part never carries a tag that came
// from a param (no "<script", no '<' beyond the template's own), no link
// that runs script, and the subject never carries a line break (a header
// injection).
func FuzzEmailTemplates(f *testing.F) {
	for _, seed := range [][2]string{
		{`{"author":"<script>alert(1)</script>","title":"</title><script>x</script>","body":"<img src=x onerror=alert(1)>","url":"javascript:alert(1)"}`, "Ada"},
		{`{"author":"\" onmouseover=\"alert(1)","class":"x\" onclick=\"y","color":"red;background:url(javascript:alert(1))","img":"data:text/html,<script>1</script>"}`, "<b>Bob</b>"},
		{`{"url":" JaVaScRiPt:alert(1)","body":"]]><!--<script>","title":"\u003cscript\u003e"}`, "\"><script>alert(document.cookie)</script>"},
		{`{"url":"vbscript:msgbox(1)","img":"javascript&#58;alert(1)","nested":{"deep":"<svg onload=alert(1)>"}}`, ""},
		{`{"author":"line\r\nBcc: victim@example.com","title":"x\nSubject: spoofed"}`, "Eve\r\nBcc: x@y"},
		{`{"url":"https://example.com/?a=<script>&b=\"x\"","body":"{{.author}}","title":["<script>",1,null]}`, "{{recipient.Email}}"},
		{`{"author":1e308,"body":12345678901234567890123,"title":true,"url":null}`, "\x00\xff"},
		{`{}`, ""},
	} {
		f.Add(seed[0], seed[1])
	}
	cfg, err := config.Parse("fuzz.yaml", []byte(fuzzTemplateConfig))
	if err != nil {
		f.Fatal(err)
	}
	reg, err := channels.NewRegistry(Plugin)
	if err != nil {
		f.Fatal(err)
	}
	opened, err := reg.Open(cfg, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	s := opened.Channels[Name].(*Sender)
	nt := s.notifiers["comment.created"]
	set := nt.sets[nt.t]
	wantTags := strings.Count(templateSource, "<")
	f.Fuzz(func(t *testing.T, paramsJSON, name string) {
		var params map[string]any
		if json.Unmarshal([]byte(paramsJSON), &params) != nil {
			return
		}
		r := channels.Recipient{ID: "u1", Email: "u1@example.com", Name: name}
		subject, _, htmlPart, err := set.renderEmail(r, params)
		if err != nil {
			// Rendering may fail (a param of a type the template cannot
			// reach into); the send is then refused. It must not panic.
			return
		}
		checkHTML(t, htmlPart, wantTags, paramsJSON, name)
		if strings.ContainsAny(subject, "\r\n") {
			t.Fatalf("subject carries a line break: %q", subject)
		}

		// The same values as digest items: in_app titles are rendered with
		// text/template (not escaped) and reach the digest's html part.
		title, _ := params["title"].(string)
		link, _ := params["url"].(string)
		data := templates.DigestData{Recipient: r, Count: 2, Items: []templates.DigestItem{
			{Notifier: "comment.created", Key: "k", Title: title, URL: link, Params: params, CreatedAt: time.Unix(0, 0)},
			{Notifier: "comment.created", Key: "k2", Title: name, URL: name, Params: map[string]any{"body": paramsJSON}},
		}}
		subject, _, htmlPart, err = s.digest.set.renderDigest(r, data)
		if err != nil {
			return
		}
		if strings.ContainsAny(subject, "\r\n") {
			t.Fatalf("digest subject carries a line break: %q", subject)
		}
		// Two items: the <li> and <a> (and their closing tags) twice, plus <ul></ul>.
		checkHTML(t, htmlPart, 2+2*4, paramsJSON, name)
	})
}

// checkHTML fails when rendered html has more '<' than its template (a tag
// from a param), a script element, or a link or image whose URL would run
// script.
func checkHTML(t *testing.T, rendered string, wantTags int, params, name string) {
	t.Helper()
	lower := strings.ToLower(rendered)
	if strings.Contains(lower, "<script") {
		t.Fatalf("html part contains <script (params %s, name %q):\n%s", params, name, rendered)
	}
	if got := strings.Count(rendered, "<"); got != wantTags {
		t.Fatalf("html part has %d '<', the template %d: a param added markup (params %s, name %q):\n%s",
			got, wantTags, params, name, rendered)
	}
	for _, m := range hrefRE.FindAllStringSubmatch(rendered, -1) {
		u := strings.ToLower(strings.TrimSpace(html.UnescapeString(m[1] + m[2])))
		u = strings.Map(func(r rune) rune {
			if r <= ' ' {
				return -1 // browsers ignore control characters and spaces in schemes
			}
			return r
		}, u)
		for _, scheme := range []string{"javascript:", "vbscript:", "data:"} {
			if strings.HasPrefix(u, scheme) {
				t.Fatalf("html part links to %q (params %s, name %q):\n%s", m[0], params, name, rendered)
			}
		}
	}
}
