package email_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-msgauth/dkim"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/email"
	"github.com/notifyd/notifyd/channels/unsubscribe"
	"github.com/notifyd/notifyd/config"
)

const testTokenSecret = "a-token-secret-of-at-least-32-bytes"

func withUnsubscribe(mailto string) setupOpt {
	return func(c *email.Config, o *email.Options) {
		c.UnsubscribeURL = "https://notify.acme.test/base/"
		c.UnsubscribeMailto = mailto
		o.TokenSecret = testTokenSecret
		o.Notifier = func(name string) (string, bool, bool) {
			switch name {
			case "comment.created":
				return "comments", false, true
			case "text.only":
				return "", true, true // required: no link
			}
			return "", false, false
		}
	}
}

// tokenOf returns the token of the https URI in a List-Unsubscribe value.
func tokenOf(t *testing.T, header string) unsubscribe.Token {
	t.Helper()
	const prefix = "<https://notify.acme.test/base/v1/unsubscribe/"
	if !strings.HasPrefix(header, prefix) {
		t.Fatalf("List-Unsubscribe = %q, want it to start with %q", header, prefix)
	}
	tok, _, _ := strings.Cut(header[len(prefix):], ">")
	s, _ := unsubscribe.NewSigner(testTokenSecret)
	got, err := s.VerifyAt(tok, fixedNow) // the sender's clock
	if err != nil {
		t.Fatalf("token %q: %v", tok, err)
	}
	if !got.IssuedAt.Equal(fixedNow.Truncate(time.Second)) || !got.Expires.Equal(got.IssuedAt.Add(unsubscribe.DefaultTTL)) {
		t.Fatalf("token issued %s, expires %s; want issued at the sender's clock, for unsubscribe_ttl's default", got.IssuedAt, got.Expires)
	}
	if _, err := s.VerifyAt(tok, got.Expires); !errors.Is(err, unsubscribe.ErrExpired) {
		t.Fatalf("token at its expiry: %v, want ErrExpired", err)
	}
	return got
}

func TestUnsubscribeHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, withUnsubscribe("unsub@acme.test"))
	ctx := context.Background()
	// A recipient id that tries to close the URI and add another, and a line.
	evil := &channels.Recipient{ID: "u1>, <https://evil.test/>\r\nBcc: x@evil.test", Email: "ann@example.test"}
	if err := b.sender.Send(ctx, msg("d-1", evil)); err != nil {
		t.Fatal(err)
	}
	req := msg("d-2", ann())
	req.Notifier = "text.only"
	req.Params = map[string]any{"n": 1}
	if err := b.sender.Send(ctx, req); err != nil {
		t.Fatal(err)
	}
	err := b.sender.SendDigest(ctx, channels.Digest{ID: "dg-1", Recipient: *ann(), Items: []channels.DigestItem{
		{Notifier: "comment.created", Title: "a"}, {Notifier: "text.only", Title: "b"},
		{Notifier: "other", Category: "billing", Title: "c"}, {Notifier: "comment.created", Title: "d"},
		{Notifier: "loose", Title: "e"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := b.srv.WaitFor(3, 5*time.Second)
	if len(msgs) != 3 {
		t.Fatalf("got %d messages", len(msgs))
	}

	m := msgs[0]
	lu := m.HeaderValue("List-Unsubscribe")
	if strings.Count(lu, "<") != 2 || strings.Contains(lu, "evil") || m.HeaderValue("Bcc") != "" {
		t.Fatalf("List-Unsubscribe = %q: want exactly the https and mailto URIs", lu)
	}
	if !strings.Contains(lu, ", <mailto:unsub@acme.test?subject=unsubscribe%20") {
		t.Errorf("List-Unsubscribe = %q: no mailto URI", lu)
	}
	if got := m.HeaderValue("List-Unsubscribe-Post"); got != "List-Unsubscribe=One-Click" {
		t.Errorf("List-Unsubscribe-Post = %q", got)
	}
	tok := tokenOf(t, lu)
	if tok.Recipient != evil.ID || tok.Channel != email.Name || !slices.Equal(tok.Scopes, []string{"category:comments"}) {
		t.Errorf("token = %+v", tok)
	}

	if got := msgs[1].HeaderValue("List-Unsubscribe"); got != "" {
		t.Errorf("required notifier's email has List-Unsubscribe %q", got)
	}
	if got := msgs[1].HeaderValue("List-Unsubscribe-Post"); got != "" {
		t.Errorf("required notifier's email has List-Unsubscribe-Post %q", got)
	}

	dt := tokenOf(t, msgs[2].HeaderValue("List-Unsubscribe"))
	if want := []string{"category:comments", "category:billing", "notifier:loose"}; !slices.Equal(dt.Scopes, want) {
		t.Errorf("digest scopes = %q, want %q (the required notifier left out)", dt.Scopes, want)
	}
	if msgs[2].HeaderValue("List-Unsubscribe-Post") == "" {
		t.Error("digest has no List-Unsubscribe-Post")
	}
}

func TestUnsubscribeConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"unsubscribe_url: http://notify.acme.test", "channels.email.unsubscribe_url"},
		{"unsubscribe_url: https://notify.acme.test/?x=1", "no credentials, query or fragment"},
		{"unsubscribe_url: notify.acme.test", "absolute URL"},
		{"unsubscribe_mailto: u@acme.test", "needs unsubscribe_url"},
		{"unsubscribe_url: https://n.acme.test\n    unsubscribe_mailto: \"a@b.test?cc=x\"", "bare address"},
		{"list_unsubscribe: \"https://x/{{.Recipient.ID}}\"", "was removed: set unsubscribe_url"},
		{"dkim: {domain: acme.test, selector: s1, private_key_file: /nonexistent/key.pem}", "channels.email.dkim.private_key_file"},
		{"dkim: {selector: s1, private_key_file: x}", "channels.email.dkim.domain"},
	} {
		yaml := fmt.Sprintf(`
http:
  token_secret: %s
channels:
  email:
    from: "Acme <notify@acme.test>"
    smtp: {host: 127.0.0.1, port: 25}
    %s
notifiers:
  n:
    channels:
      email: {subject: s, text: t}
`, testTokenSecret, tc.yaml)
		c, err := config.Parse("test.yaml", []byte(yaml))
		if err == nil {
			reg, _ := channels.NewRegistry(email.Plugin)
			_, err = reg.Open(c, nil, nil)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "test.yaml:") {
			t.Errorf("%s: err = %v, want one naming test.yaml:line and %q", tc.yaml, err, tc.want)
		}
	}
	// Loopback http is the development setting.
	c, err := config.Parse("test.yaml", []byte(fmt.Sprintf(`
http: {token_secret: %s}
channels:
  email: {from: "a@acme.test", smtp: {host: 127.0.0.1, port: 25}, unsubscribe_url: "http://127.0.0.1:8025"}
`, testTokenSecret)))
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := channels.NewRegistry(email.Plugin)
	if _, err := reg.Open(c, nil, nil); err != nil {
		t.Errorf("loopback http refused: %v", err)
	}
}

func TestMailboxUnknownSuppresses(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	b.srv.FailNextRcpt(1, 550, "5.1.1 no such user here")
	err := b.sender.Send(ctx, msg("d-1", ann()))
	se, ok := channels.SuppressionOf(err)
	if !ok || kind(t, err) != channels.KindPermanent {
		t.Fatalf("err = %v, want a permanent suppression", err)
	}
	if se.Address != "ann@example.test" || !strings.Contains(se.Reason, "5.1.1") || !strings.Contains(se.Reason, "no such user here") {
		t.Errorf("suppression = %+v", se)
	}
	// Other 5xx replies refuse without suppressing.
	for _, text := range []string{"5.7.1 policy", "rejected"} {
		b.srv.FailNextRcpt(1, 550, text)
		err = b.sender.Send(ctx, msg("d-2", ann()))
		if _, ok := channels.SuppressionOf(err); ok || kind(t, err) != channels.KindPermanent {
			t.Errorf("%q: err = %v, want permanent, not suppressed", text, err)
		}
	}
	// A 5.1.x refusal of the data names the one mailbox too.
	b.srv.FailNext(1, 550, "5.1.10 recipient address has null MX")
	err = b.sender.Send(ctx, msg("d-3", ann()))
	if se, ok := channels.SuppressionOf(err); !ok || se.Address != "ann@example.test" {
		t.Errorf("DATA 5.1.10: err = %v, want a suppression", err)
	}
	// 4.1.x is temporary, never a suppression.
	b.srv.FailNextRcpt(1, 450, "4.1.1 try later")
	err = b.sender.Send(ctx, msg("d-4", ann()))
	if _, ok := channels.SuppressionOf(err); ok || kind(t, err) != channels.KindTemporary {
		t.Errorf("450 4.1.1: err = %v, want temporary", err)
	}
}

func writeKey(t *testing.T, key any) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "dkim.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDKIMSignature(t *testing.T) {
	t.Parallel()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string]any{"rsa": rsaKey, "ed25519": edKey} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := writeKey(t, key)
			b := setup(t, nil, withUnsubscribe(""), func(c *email.Config, _ *email.Options) {
				c.DKIM = &email.DKIM{Domain: "acme.test", Selector: "s2026", PrivateKeyFile: path}
			})
			if err := b.sender.Send(context.Background(), msg("d-1", ann())); err != nil {
				t.Fatal(err)
			}
			msgs := b.srv.WaitFor(1, 5*time.Second)
			if len(msgs) != 1 {
				t.Fatal("no message")
			}
			signer, _ := email.LoadDKIMKey(path)
			record, err := email.DKIMRecord(signer)
			if err != nil {
				t.Fatal(err)
			}
			lookups := 0
			opts := &dkim.VerifyOptions{LookupTXT: func(domain string) ([]string, error) {
				lookups++
				if domain != "s2026._domainkey.acme.test" {
					return nil, fmt.Errorf("unexpected lookup of %s", domain)
				}
				return []string{record}, nil
			}}
			verify := func(data []byte) *dkim.Verification {
				vs, err := dkim.VerifyWithOptions(bytes.NewReader(data), opts)
				if err != nil || len(vs) != 1 {
					t.Fatalf("verify: %v, %d signatures", err, len(vs))
				}
				return vs[0]
			}
			v := verify(msgs[0].Data)
			if v.Err != nil || v.Domain != "acme.test" || lookups == 0 {
				t.Fatalf("signature does not verify: %+v", v)
			}
			for _, h := range []string{"from", "subject", "list-unsubscribe", "list-unsubscribe-post", "message-id", "date", "to"} {
				if !slices.ContainsFunc(v.HeaderKeys, func(k string) bool { return strings.EqualFold(k, h) }) {
					t.Errorf("signature does not cover %s (covers %q)", h, v.HeaderKeys)
				}
			}
			// A changed subject or unsubscribe link breaks it.
			for _, old := range []string{"Subject: New comment", "List-Unsubscribe-Post: List-Unsubscribe=One-Click"} {
				bad := bytes.Replace(msgs[0].Data, []byte(old), []byte(old+"x"), 1)
				if bytes.Equal(bad, msgs[0].Data) {
					t.Fatalf("%q not in the message", old)
				}
				if v := verify(bad); v.Err == nil {
					t.Errorf("signature still verifies after changing %q", old)
				}
			}
		})
	}
}

func TestDKIMKeyProblems(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "x.pem")
	_ = os.WriteFile(notPEM, []byte("hello"), 0o600)
	for path, want := range map[string]string{
		notPEM:           "no PEM block",
		dir + "/missing": "no such file",
	} {
		if _, err := email.LoadDKIMKey(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
}
