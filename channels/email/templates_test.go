package email_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/email"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/smtpcapture"
)

// forConfig has a notifier with locale variants and one without email.
const forConfig = `
channels:
  email:
    from: "Acme <notify@acme.test>"
    smtp: {host: %s, port: %d, tls: none}
notifiers:
  comment.created:
    channels:
      email:
        subject: "New comment on {{.post_title}}"
        text: "{{.author_name}}: {{.excerpt}}"
        html: "<p>{{.author_name}}: {{.excerpt}}</p>"
        locales:
          fr: {subject: "Nouveau commentaire sur {{.post_title}}", text: "fr"}
          pt-BR: {subject: "Novo comentário em {{.post_title}}", text: "pt-BR"}
  no.channels: {}
`

var forLocales = []struct {
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

// TestTemplatesFor picks the variant for a locale from the notifier's
// section as the channel decodes it.
func TestTemplatesFor(t *testing.T) {
	t.Parallel()

	c, err := config.ParseWith("test.yaml", fmt.Appendf(nil, forConfig, "127.0.0.1", 25), checkEmail(t))
	if err != nil {
		t.Fatal(err)
	}
	var tmpl email.Templates
	p := c.NewProblems()
	p.Decode(c.Notifiers["comment.created"].Channels["email"].Section, &tmpl)
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	sources := map[string]string{
		"New comment on Hello":          "New comment on {{.post_title}}",
		"Nouveau commentaire sur Hello": "Nouveau commentaire sur {{.post_title}}",
		"Novo comentário em Hello":      "Novo comentário em {{.post_title}}",
	}
	for _, tc := range forLocales {
		if got := tmpl.For(tc.locale).Subject; got != sources[tc.subject] {
			t.Errorf("For(%q).Subject = %q, want %q", tc.locale, got, sources[tc.subject])
		}
	}
	if tmpl.For("") != &tmpl || tmpl.For("de") != &tmpl {
		t.Error("For without a matching variant is not the templates themselves")
	}
	if fr := tmpl.For("fr"); fr.Text != "fr" || fr.HTML != "" {
		t.Errorf("fr variant = %+v, want its own text and no html", fr)
	}
	if bare := (&email.Templates{}); bare.For("fr") != bare {
		t.Error("For on templates without variants is not the templates themselves")
	}
}

func checkEmail(t *testing.T) config.Checker {
	t.Helper()
	reg, err := channels.NewRegistry(email.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	return reg.Check
}

// TestEmailForAndRender renders a loaded notifier's email through the
// channel for recipients of each locale: the subject comes from the
// variant, the text part is not escaped, the html part escapes the params.
func TestEmailForAndRender(t *testing.T) {
	t.Parallel()

	srv := smtpcapture.Start(t)
	c, err := config.ParseWith("test.yaml", fmt.Appendf(nil, forConfig, srv.Host(), srv.Port()), checkEmail(t))
	if err != nil {
		t.Fatal(err)
	}
	s := openSender(t, c)
	defer s.Close()
	params := map[string]any{"author_name": "<Ada>", "post_title": "Hello", "excerpt": "a & b"}
	ctx := context.Background()
	for i, tc := range forLocales {
		r := &channels.Recipient{ID: fmt.Sprintf("u%d", i), Email: fmt.Sprintf("loc%d@example.test", i), Locale: tc.locale}
		m := channels.Message{DeliveryID: fmt.Sprintf("d-%d", i), Notifier: "comment.created", Recipient: r, Params: params}
		if err := s.Send(ctx, m); err != nil {
			t.Fatalf("locale %q: %v", tc.locale, err)
		}
	}
	msgs := srv.WaitFor(len(forLocales), 5*time.Second)
	byTo := map[string]smtpcapture.Message{}
	for _, m := range msgs {
		byTo[m.To[0]] = m
	}
	for i, tc := range forLocales {
		m, ok := byTo[fmt.Sprintf("loc%d@example.test", i)]
		if !ok {
			t.Errorf("locale %q: no message", tc.locale)
			continue
		}
		if m.ParseErr != nil {
			t.Errorf("locale %q: %v", tc.locale, m.ParseErr)
		}
		if m.Subject != tc.subject {
			t.Errorf("locale %q: subject = %q, want %q", tc.locale, m.Subject, tc.subject)
		}
	}

	def := byTo["loc0@example.test"]
	if def.Text != "<Ada>: a & b" {
		t.Errorf("text = %q: text parts are not escaped", def.Text)
	}
	if def.HTML != "<p>&lt;Ada&gt;: a &amp; b</p>" {
		t.Errorf("html = %q: params must be escaped", def.HTML)
	}
	if fr := byTo["loc2@example.test"]; fr.Text != "fr" || fr.HTML != "" || fr.ContentType != "text/plain" {
		t.Errorf("fr variant = (%q, %q, %s), want its own text and no html", fr.Text, fr.HTML, fr.ContentType)
	}

	// A notifier without email templates has nothing to send.
	r := &channels.Recipient{ID: "u", Email: "u@example.test", Locale: "fr"}
	if err := s.Addressable("no.channels", *r); err == nil {
		t.Error("Addressable on a notifier without email is nil")
	}
	err = s.Send(ctx, channels.Message{DeliveryID: "d-none", Notifier: "no.channels", Recipient: r})
	if k, _ := channels.Classify(err); err == nil || k != channels.KindPermanent {
		t.Errorf("Send on a notifier without email = %v (kind %v), want a permanent error", err, k)
	}
}
