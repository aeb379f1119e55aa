package email_test

import (
	"context"
	"fmt"
	"net"
	netmail "net/mail"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/email"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/server/servertest"
)

var fixedNow = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func testNotifiers() map[string]*email.Templates {
	return map[string]*email.Templates{
		"comment.created": {
			Subject: "New comment on {{.post_title}}",
			Text:    "Hi {{recipient.Name}}, {{.author_name}} wrote: {{.body}}",
			HTML:    "<p>Hi {{recipient.Name}}, {{.author_name}} wrote: {{.body}}</p>",
			Locales: map[string]*email.Templates{
				"fr":    {Subject: "Nouveau commentaire sur {{.post_title}}", Text: "Bonjour {{recipient.Name}}"},
				"pt-BR": {Subject: "Novo comentário em {{.post_title}}", Text: "Olá {{recipient.Name}}"},
			},
		},
		"text.only": {
			Subject: "Plain {{.n}}",
			Text:    "just text {{.n}}",
		},
		"broken": {
			Subject: "Broken",
			Text:    "{{index .missing 3}}",
		},
	}
}

// openSender opens the email channel on a parsed config, as the daemon does.
func openSender(t *testing.T, c *config.Config) *email.Sender {
	t.Helper()
	reg, err := channels.NewRegistry(email.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	set, err := reg.Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := set.Channels[email.Name].(*email.Sender)
	if !ok {
		t.Fatalf("email channel not configured: %v", set.Channels)
	}
	return s
}

func testDigest() *config.Digest {
	return &config.Digest{
		MaxItems: 2,
		Subject:  "Your {{.Count}} new notifications",
		Text:     "{{range .Items}}- {{.Title}}\n{{end}}{{if .More}}and {{.More}} more\n{{end}}",
		HTML:     "<p>Hi {{.Recipient.Name}}</p><ul>{{range .Items}}<li>{{.Title}}</li>{{end}}</ul>",
	}
}

type bundle struct {
	srv    *smtpcapture.Server
	sender *email.Sender
	cfg    *email.Config
}

type setupOpt func(*email.Config, *email.Options)

func setup(t *testing.T, srvOpts []smtpcapture.Option, opts ...setupOpt) bundle {
	t.Helper()
	srv := smtpcapture.Start(t, srvOpts...)
	cfg := &email.Config{
		From:    "Acme <notify@acme.test>",
		SMTP:    email.SMTP{Host: srv.Host(), Port: srv.Port(), TLS: "none"},
		Timeout: config.Duration(5 * time.Second),
	}
	o := email.Options{Clock: func() time.Time { return fixedNow }}
	for _, f := range opts {
		f(cfg, &o)
	}
	s, err := email.New(cfg, testDigest(), testNotifiers(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return bundle{srv: srv, sender: s, cfg: cfg}
}

func ann() *channels.Recipient {
	return &channels.Recipient{ID: "u-ann", Email: "ann@example.test", Name: "Ann"}
}

func msg(id string, r *channels.Recipient) channels.Message {
	return channels.Message{
		DeliveryID: id, NotificationID: "n-" + id, Notifier: "comment.created", Key: "k-" + id,
		Recipient: r,
		Params:    map[string]any{"post_title": "Hello", "author_name": "Bob", "body": `<script>alert("x")</script>`},
	}
}

func kind(t *testing.T, err error) channels.Kind {
	t.Helper()
	if err == nil {
		t.Fatal("got nil error")
	}
	k, _ := channels.Classify(err)
	return k
}

func TestSendRendersMultipart(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if err := b.sender.Send(context.Background(), msg("d-1", ann())); err != nil {
		t.Fatal(err)
	}
	msgs := b.srv.WaitFor(1, 5*time.Second)
	if len(msgs) != 1 {
		t.Fatalf("got %d messages, want 1", len(msgs))
	}
	m := msgs[0]
	if m.ParseErr != nil {
		t.Fatal(m.ParseErr)
	}
	if m.Subject != "New comment on Hello" {
		t.Errorf("Subject = %q", m.Subject)
	}
	if m.ContentType != "multipart/alternative" {
		t.Errorf("ContentType = %q, want multipart/alternative", m.ContentType)
	}
	if want := `Hi Ann, Bob wrote: <script>alert("x")</script>`; m.Text != want {
		t.Errorf("Text = %q, want %q (verbatim)", m.Text, want)
	}
	if want := `<p>Hi Ann, Bob wrote: &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;</p>`; m.HTML != want {
		t.Errorf("HTML = %q, want %q (escaped)", m.HTML, want)
	}
	if m.MessageID != "<d-1@acme.test>" {
		t.Errorf("Message-ID = %q, want <d-1@acme.test>", m.MessageID)
	}
	if got := m.HeaderValue("X-Notifyd-Delivery"); got != "d-1" {
		t.Errorf("X-Notifyd-Delivery = %q", got)
	}
	if got := m.HeaderValue("X-Notifyd-Notifier"); got != "comment.created" {
		t.Errorf("X-Notifyd-Notifier = %q", got)
	}
	to, err := netmail.ParseAddress(m.HeaderValue("To"))
	if err != nil || to.Name != "Ann" || to.Address != "ann@example.test" {
		t.Errorf("To = %q (%v)", m.HeaderValue("To"), err)
	}
	from, err := netmail.ParseAddress(m.HeaderValue("From"))
	if err != nil || from.Name != "Acme" || from.Address != "notify@acme.test" {
		t.Errorf("From = %q (%v)", m.HeaderValue("From"), err)
	}
	if d, err := m.Header.Date(); err != nil || !d.Equal(fixedNow) {
		t.Errorf("Date = %q (%v), want %v", m.Header.Get("Date"), err, fixedNow)
	}
	if m.From != "notify@acme.test" || len(m.To) != 1 || m.To[0] != "ann@example.test" {
		t.Errorf("envelope = %q -> %q", m.From, m.To)
	}
	if m.Header.Get("List-Unsubscribe") != "" {
		t.Errorf("List-Unsubscribe set without config: %q", m.Header.Get("List-Unsubscribe"))
	}
}

func TestTextOnlyIsNotMultipart(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	m := msg("d-text", ann())
	m.Notifier, m.Params = "text.only", map[string]any{"n": 7}
	if err := b.sender.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	got := b.srv.WaitFor(1, 5*time.Second)
	if len(got) != 1 || got[0].ContentType != "text/plain" || got[0].Text != "just text 7" || got[0].HTML != "" {
		t.Fatalf("got %+v", got)
	}
}

func TestMessageIDStableAcrossRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.FailNext(1, 451, "greylisted")
	m := msg("0194d1e8-7b3c-7def-8a00-000000000001", ann())
	if k := kind(t, b.sender.Send(context.Background(), m)); k != channels.KindTemporary {
		t.Fatalf("first attempt kind = %v, want temporary", k)
	}
	m.Attempt = 2
	if err := b.sender.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	// A duplicate from the crash window carries the same id again.
	m.Attempt = 3
	if err := b.sender.Send(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	msgs := b.srv.WaitFor(2, 5*time.Second)
	if len(msgs) != 2 {
		t.Fatalf("got %d messages, want 2", len(msgs))
	}
	want := "<0194d1e8-7b3c-7def-8a00-000000000001@acme.test>"
	for i, got := range msgs {
		if got.MessageID != want {
			t.Errorf("message %d: Message-ID = %q, want %q", i, got.MessageID, want)
		}
	}
}

func TestLocaleFallback(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	tests := []struct{ locale, subject, text string }{
		{"fr-CA", "Nouveau commentaire sur Hello", "Bonjour Ann"},
		{"fr", "Nouveau commentaire sur Hello", "Bonjour Ann"},
		{"pt-BR", "Novo comentário em Hello", "Olá Ann"},
		{"pt_br", "Novo comentário em Hello", "Olá Ann"},
		{"pt-PT", "New comment on Hello", "Hi Ann, Bob wrote: x"},
		{"de", "New comment on Hello", "Hi Ann, Bob wrote: x"},
		{"", "New comment on Hello", "Hi Ann, Bob wrote: x"},
	}
	for i, tt := range tests {
		r := ann()
		r.Locale = tt.locale
		r.Email = fmt.Sprintf("loc%d@example.test", i)
		m := msg(fmt.Sprintf("d-loc-%d", i), r)
		m.Params["body"] = "x"
		if err := b.sender.Send(context.Background(), m); err != nil {
			t.Fatalf("locale %q: %v", tt.locale, err)
		}
	}
	msgs := b.srv.WaitFor(len(tests), 5*time.Second)
	byTo := map[string]smtpcapture.Message{}
	for _, m := range msgs {
		byTo[m.To[0]] = m
	}
	for i, tt := range tests {
		m, ok := byTo[fmt.Sprintf("loc%d@example.test", i)]
		if !ok {
			t.Errorf("locale %q: no message", tt.locale)
			continue
		}
		if m.Subject != tt.subject || m.Text != tt.text {
			t.Errorf("locale %q: got %q / %q, want %q / %q", tt.locale, m.Subject, m.Text, tt.subject, tt.text)
		}
	}
}

func TestSMTPReplyClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script func(*smtpcapture.Server)
		want   channels.Kind
		text   string
	}{
		{"451 at DATA", func(s *smtpcapture.Server) { s.FailNext(1, 451, "try again later") }, channels.KindTemporary, "451"},
		{"550 at DATA", func(s *smtpcapture.Server) { s.FailNext(1, 550, "message rejected as spam") }, channels.KindPermanent, "message rejected as spam"},
		{"452 at RCPT", func(s *smtpcapture.Server) { s.FailNextRcpt(1, 452, "mailbox full") }, channels.KindTemporary, "mailbox full"},
		{"550 at RCPT", func(s *smtpcapture.Server) { s.FailRecipient("ann@example.test", 550) }, channels.KindPermanent, "550"},
		{"554 at DATA", func(s *smtpcapture.Server) { s.FailNext(1, 554, "no thanks") }, channels.KindPermanent, "no thanks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			tt.script(b.srv)
			err := b.sender.Send(context.Background(), msg("d-c", ann()))
			if k := kind(t, err); k != tt.want {
				t.Fatalf("kind = %v, want %v (err: %v)", k, tt.want, err)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("error %q does not carry the server's reply %q", err, tt.text)
			}
			// The connection is still good: the next message goes over it.
			r := ann()
			r.Email = "other@example.test"
			if err := b.sender.Send(context.Background(), msg("d-next", r)); err != nil {
				t.Fatalf("next send: %v", err)
			}
			if n := b.srv.Connections(); n != 1 {
				t.Errorf("Connections = %d, want 1 (connection kept after a refused message)", n)
			}
		})
	}
}

func TestHungServerTimesOutWithoutBlockingOthers(t *testing.T) {
	t.Parallel()
	const timeout = 1500 * time.Millisecond
	b := setup(t, nil, func(c *email.Config, o *email.Options) {
		c.Timeout = config.Duration(timeout)
		o.PoolSize = 2
	})
	b.srv.HangNext(1, time.Minute)

	hung := make(chan error, 1)
	start := time.Now()
	go func() { hung <- b.sender.Send(context.Background(), msg("d-hung", ann())) }()
	servertest.Eventually(t, 5*time.Second, "the server to stall the first send", func() bool { return b.srv.Hanging() == 1 })

	// Meanwhile another send gets through on another connection.
	r := ann()
	r.Email = "fast@example.test"
	fastStart := time.Now()
	if err := b.sender.Send(context.Background(), msg("d-fast", r)); err != nil {
		t.Fatalf("send while another connection hangs: %v", err)
	}
	if d := time.Since(fastStart); d > timeout/2 {
		t.Errorf("send beside a hung connection took %v", d)
	}
	select {
	case err := <-hung:
		t.Fatalf("hung send returned before the other one was done: %v", err)
	default:
	}

	err := <-hung
	elapsed := time.Since(start)
	if k := kind(t, err); k != channels.KindTemporary {
		t.Fatalf("hung send kind = %v, want temporary (err: %v)", k, err)
	}
	if elapsed > timeout+2*time.Second {
		t.Errorf("hung send returned after %v, timeout is %v", elapsed, timeout)
	}
	if !strings.Contains(err.Error(), "timed out") {
		t.Errorf("error %q does not say it timed out", err)
	}
	// The sender recovers: the hung connection was dropped, not reused.
	if err := b.sender.Send(context.Background(), msg("d-after", ann())); err != nil {
		t.Fatalf("send after the hang: %v", err)
	}
}

func TestContextCancelInterruptsHungSend(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.srv.Hang(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := b.sender.Send(ctx, msg("d-ctx", ann()))
	if k := kind(t, err); k != channels.KindTemporary {
		t.Fatalf("kind = %v, want temporary", k)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("cancelled send returned after %v", d)
	}
}

func TestConnectionReuse(t *testing.T) {
	t.Parallel()
	const poolSize, total, workers = 4, 200, 16
	b := setup(t, nil, func(_ *email.Config, o *email.Options) { o.PoolSize = poolSize })
	var wg sync.WaitGroup
	errs := make(chan error, total)
	next := make(chan int, total)
	for i := range total {
		next <- i
	}
	close(next)
	for range workers {
		wg.Go(func() {
			for i := range next {
				r := &channels.Recipient{ID: fmt.Sprint(i), Email: fmt.Sprintf("r%d@example.test", i)}
				if err := b.sender.Send(context.Background(), msg(fmt.Sprintf("d-%d", i), r)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := len(b.srv.WaitFor(total, 5*time.Second)); got != total {
		t.Fatalf("received %d messages, want %d", got, total)
	}
	if n := b.srv.Connections(); n < 1 || n > poolSize {
		t.Fatalf("Connections = %d, want between 1 and %d", n, poolSize)
	}
}

func TestRedialsAfterServerRestart(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	if err := b.sender.Send(ctx, msg("d-before", ann())); err != nil {
		t.Fatal(err)
	}
	b.srv.Down()
	if k := kind(t, b.sender.Send(ctx, msg("d-down", ann()))); k != channels.KindTemporary {
		t.Fatalf("send while down: kind %v, want temporary", k)
	}
	if err := b.srv.Up(); err != nil {
		t.Fatal(err)
	}
	if err := b.sender.Send(ctx, msg("d-after", ann())); err != nil {
		t.Fatalf("send after restart: %v", err)
	}
	if got := b.srv.WaitFor(2, 5*time.Second); len(got) != 2 {
		t.Fatalf("got %d messages, want 2", len(got))
	}
}

func TestStaleIdleConnectionIsRedialled(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	if err := b.sender.Send(ctx, msg("d-1", ann())); err != nil {
		t.Fatal(err)
	}
	// Restart quickly: the pooled connection is dead, the sender has not
	// noticed. The next send must redial on its own, not fail.
	b.srv.Down()
	if err := b.srv.Up(); err != nil {
		t.Fatal(err)
	}
	if err := b.sender.Send(ctx, msg("d-2", ann())); err != nil {
		t.Fatalf("send over a stale pooled connection: %v", err)
	}
	if n := b.srv.Connections(); n != 2 {
		t.Errorf("Connections = %d, want 2", n)
	}
}

func TestRateLimited(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, func(c *email.Config, _ *email.Options) { c.Rate = 1 })
	ctx := context.Background()
	if err := b.sender.Send(ctx, msg("d-1", ann())); err != nil {
		t.Fatal(err)
	}
	err := b.sender.Send(ctx, msg("d-2", ann()))
	k, after := channels.Classify(err)
	if k != channels.KindRateLimited || after <= 0 || after > time.Second {
		t.Fatalf("second send: kind %v after %v (err %v), want rate_limited within 1s", k, after, err)
	}
	if n := b.srv.WaitFor(1, time.Second); len(n) != 1 {
		t.Fatalf("got %d messages, want 1", len(n))
	}
}

func TestAddressable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	tests := []struct {
		notifier string
		r        channels.Recipient
		want     string
	}{
		{"comment.created", channels.Recipient{ID: "a", Email: "a@example.test"}, ""},
		{"comment.created", channels.Recipient{ID: "a"}, "recipient has no email address"},
		{"comment.created", channels.Recipient{ID: "a", Email: "not an address"}, "invalid"},
		{"comment.created", channels.Recipient{ID: "a", Email: "Ann <a@example.test>"}, "invalid"},
		{"inbox.only", channels.Recipient{ID: "a", Email: "a@example.test"}, "no email templates"},
		{"nope", channels.Recipient{ID: "a", Email: "a@example.test"}, "no email templates"},
	}
	for _, tt := range tests {
		err := b.sender.Addressable(tt.notifier, tt.r)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s %+v: %v", tt.notifier, tt.r, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s %+v: err %v, want %q", tt.notifier, tt.r, err, tt.want)
		}
	}
	if got := b.sender.Name(); got != email.Name {
		t.Errorf("Name = %q", got)
	}
}

func TestPermanentWithoutContacting(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	noEmail := msg("d-1", &channels.Recipient{ID: "x"})
	broken := msg("d-2", ann())
	broken.Notifier = "broken"
	badID := msg("bad id", ann())
	for name, m := range map[string]channels.Message{
		"no recipient": msg("d-0", nil), "no email": noEmail, "render error": broken, "bad delivery id": badID,
	} {
		if k := kind(t, b.sender.Send(ctx, m)); k != channels.KindPermanent {
			t.Errorf("%s: kind %v, want permanent", name, k)
		}
	}
	if n := b.srv.Connections(); n != 0 {
		t.Errorf("Connections = %d, want 0", n)
	}
}

func TestSendDigest(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	items := []channels.DigestItem{{Title: "First <b>"}, {Title: "Second"}, {Title: "Third"}}
	r := channels.Recipient{ID: "u-ann", Email: "ann@example.test", Name: "Ann & co"}
	err := b.sender.SendDigest(context.Background(), channels.Digest{
		ID: "dg-1", Recipient: r, Items: items, Count: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	msgs := b.srv.WaitFor(1, 5*time.Second)
	if len(msgs) != 1 {
		t.Fatal("no digest received")
	}
	m := msgs[0]
	if m.Subject != "Your 5 new notifications" {
		t.Errorf("Subject = %q", m.Subject)
	}
	if want := "- First <b>\n- Second\nand 3 more\n"; m.Text != want {
		t.Errorf("Text = %q, want %q", m.Text, want)
	}
	if want := "<p>Hi Ann &amp; co</p><ul><li>First &lt;b&gt;</li><li>Second</li></ul>"; m.HTML != want {
		t.Errorf("HTML = %q, want %q", m.HTML, want)
	}
	if m.MessageID != "<dg-1@acme.test>" {
		t.Errorf("Message-ID = %q", m.MessageID)
	}
	if got := m.HeaderValue("X-Notifyd-Digest"); got != "5" {
		t.Errorf("X-Notifyd-Digest = %q", got)
	}
	if len(items) != 3 {
		t.Errorf("caller's items were changed")
	}
}

func TestSendDigestFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	if k := kind(t, b.sender.SendDigest(ctx, channels.Digest{ID: "dg", Recipient: *ann()})); k != channels.KindPermanent {
		t.Errorf("empty digest: kind %v", k)
	}
	b.srv.FailNext(1, 451, "later")
	err := b.sender.SendDigest(ctx, channels.Digest{
		ID: "dg", Recipient: *ann(), Items: []channels.DigestItem{{Title: "x"}},
	})
	if k := kind(t, err); k != channels.KindTemporary {
		t.Errorf("451: kind %v", k)
	}

	noDigest, err := email.New(b.cfg, nil, testNotifiers(), email.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer noDigest.Close()
	err = noDigest.SendDigest(ctx, channels.Digest{
		ID: "dg", Recipient: *ann(), Items: []channels.DigestItem{{Title: "x"}},
	})
	if k := kind(t, err); k != channels.KindPermanent {
		t.Errorf("no digest config: kind %v", k)
	}
}

func TestSendAfterCloseFails(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if err := b.sender.Send(context.Background(), msg("d-1", ann())); err != nil {
		t.Fatal(err)
	}
	if err := b.sender.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.sender.Send(context.Background(), msg("d-2", ann())); err == nil {
		t.Fatal("send after Close succeeded")
	}
}

func TestAuthOverSTARTTLS(t *testing.T) {
	t.Parallel()
	b := setup(t, []smtpcapture.Option{smtpcapture.WithAuth("mailer", "s3cret"), smtpcapture.WithSTARTTLS()},
		func(c *email.Config, o *email.Options) {
			c.SMTP.TLS, c.SMTP.Username, c.SMTP.Password = "starttls", "mailer", "s3cret"
		})
	// The certificate is for 127.0.0.1; trust it.
	cfg := *b.cfg
	s, err := email.New(&cfg, nil, testNotifiers(), email.Options{TLSConfig: b.srv.ClientTLSConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Send(context.Background(), msg("d-tls", ann())); err != nil {
		t.Fatal(err)
	}
	// Without trusting the certificate the handshake fails: temporary.
	if k := kind(t, b.sender.Send(context.Background(), msg("d-untrusted", ann()))); k != channels.KindTemporary {
		t.Errorf("untrusted certificate: kind %v, want temporary", k)
	}
	// A wrong password is a configuration problem, not the message's: temporary.
	bad := cfg
	bad.SMTP.Password = "wrong"
	s2, err := email.New(&bad, nil, testNotifiers(), email.Options{TLSConfig: b.srv.ClientTLSConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if k := kind(t, s2.Send(context.Background(), msg("d-badpw", ann()))); k != channels.KindTemporary {
		t.Errorf("wrong password: kind %v, want temporary", k)
	}
	if got := b.srv.WaitFor(1, 5*time.Second); len(got) != 1 || got[0].MessageID != "<d-tls@acme.test>" {
		t.Fatalf("got %+v", got)
	}
}

func TestImplicitTLSWithAuth(t *testing.T) {
	t.Parallel()
	srv := smtpcapture.Start(t, smtpcapture.WithImplicitTLS(), smtpcapture.WithAuth("mailer", "pw"))
	cfg := &email.Config{
		From: "notify@acme.test",
		SMTP: email.SMTP{Host: srv.Host(), Port: srv.Port(), TLS: "tls", Username: "mailer", Password: "pw"},
	}
	s, err := email.New(cfg, nil, testNotifiers(), email.Options{TLSConfig: srv.ClientTLSConfig()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 3 {
		if err := s.Send(context.Background(), msg(fmt.Sprintf("d-%d", i), ann())); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(srv.WaitFor(3, 5*time.Second)); got != 3 {
		t.Fatalf("got %d messages", got)
	}
	if n := srv.Connections(); n != 1 {
		t.Errorf("Connections = %d, want 1", n)
	}
}

// TestLoadedConfig sends with templates compiled by config.Parse, as the
// daemon does (the html template has already been executed by the loader's
// check, so it cannot simply be cloned).
func TestLoadedConfig(t *testing.T) {
	t.Parallel()
	srv := smtpcapture.Start(t)
	yaml := fmt.Sprintf(`
channels:
  email:
    from: "Acme <notify@acme.test>"
    smtp: {host: %s, port: %d, tls: none}
    unsubscribe_url: https://acme.test/notify
http:
  token_secret: a-token-secret-of-at-least-32-bytes
digest:
  max_items: 1
notifiers:
  comment.created:
    channels:
      email:
        subject: "New comment on {{.post_title}}"
        text: "{{.author_name}} wrote {{.body}} ({{.missing}})"
        html: "<p>{{.author_name}} wrote {{.body}}</p>"
        locales:
          fr: {subject: "Commentaire sur {{.post_title}}", text: "fr {{.body}}"}
`, srv.Host(), srv.Port())
	c, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	s := openSender(t, c)
	defer s.Close()
	ctx := context.Background()
	if err := s.Send(ctx, msg("d-1", ann())); err != nil {
		t.Fatal(err)
	}
	fr := ann()
	fr.Locale, fr.Email = "fr-CA", "fr@example.test"
	if err := s.Send(ctx, msg("d-2", fr)); err != nil {
		t.Fatal(err)
	}
	if err := s.SendDigest(ctx, channels.Digest{ID: "dg", Recipient: *ann(),
		Items: []channels.DigestItem{{Title: "A"}, {Title: "B"}}}); err != nil {
		t.Fatal(err)
	}
	msgs := srv.WaitFor(3, 5*time.Second)
	if len(msgs) != 3 {
		t.Fatalf("got %d messages", len(msgs))
	}
	if m := msgs[0]; m.Text != `Bob wrote <script>alert("x")</script> ()` ||
		m.HTML != `<p>Bob wrote &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;</p>` ||
		!strings.HasPrefix(m.HeaderValue("List-Unsubscribe"), "<https://acme.test/notify/v1/unsubscribe/") {
		t.Errorf("notification: text %q html %q list-unsubscribe %q", m.Text, m.HTML, m.HeaderValue("List-Unsubscribe"))
	}
	if m := msgs[1]; m.Subject != "Commentaire sur Hello" {
		t.Errorf("fr-CA subject = %q", m.Subject)
	}
	if m := msgs[2]; m.Subject != "Your 2 new notifications" || m.Text != "- A\nand 1 more" { // single part: the final line break is DATA framing
		t.Errorf("digest: %q %q", m.Subject, m.Text)
	}
}

func TestSilentServerTimesOutInHandshake(t *testing.T) {
	t.Parallel()
	// A server that accepts connections and never greets.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	addr := ln.Addr().(*net.TCPAddr)
	const timeout = 300 * time.Millisecond
	s, err := email.New(&email.Config{
		From:    "notify@acme.test",
		SMTP:    email.SMTP{Host: "127.0.0.1", Port: addr.Port},
		Timeout: config.Duration(timeout),
	}, nil, testNotifiers(), email.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	err = s.Send(context.Background(), msg("d-silent", ann()))
	if k := kind(t, err); k != channels.KindTemporary {
		t.Fatalf("kind = %v, want temporary (err %v)", k, err)
	}
	if d := time.Since(start); d > timeout+time.Second/2 {
		t.Fatalf("send returned after %v, timeout is %v", d, timeout)
	}
	if !strings.Contains(err.Error(), "timed out") {
		t.Errorf("error %q does not say it timed out", err)
	}
}

// sendParallel times b.N sends through s, eight goroutines a core, each to
// its own recipient.
func sendParallel(b *testing.B, s *email.Sender) {
	b.Helper()
	var n atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			r := &channels.Recipient{ID: fmt.Sprint(i), Email: fmt.Sprintf("r%d@example.test", i), Name: "R"}
			if err := s.Send(context.Background(), msg(fmt.Sprintf("d-%d", i), r)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.StopTimer()
}

// BenchmarkSend measures sends through the pool into a discarding sink.
func BenchmarkSend(b *testing.B) {
	srv := smtpcapture.Start(b, smtpcapture.WithDiscard())
	s, err := email.New(&email.Config{
		From: "Acme <notify@acme.test>",
		SMTP: email.SMTP{Host: srv.Host(), Port: srv.Port()},
	}, nil, testNotifiers(), email.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	sendParallel(b, s)
	b.ReportMetric(float64(srv.Connections()), "conns")
}
