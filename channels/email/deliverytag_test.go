package email_test

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"mime/multipart"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels/deliverytag"
	"github.com/notifyd/notifyd/channels/email"
)

// With http.token_secret, every API provider's request carries the
// delivery's signed tag in the field the provider echoes back with its
// events (SES message tags, SendGrid custom args, Postmark metadata,
// Mailgun variables, Resend tags), and the tag names the delivery.
func TestProviderRequestsCarrySignedDeliveryTag(t *testing.T) {
	t.Parallel()
	const secret = "tag-secret-0123456789abcdef"
	signer, _ := deliverytag.New(secret)
	for _, c := range kindCases() {
		t.Run(c.kind, func(t *testing.T) {
			t.Parallel()
			f := startFake(t, c.check, c.ok)
			cfg := &email.Config{From: "Acme <notify@acme.test>", Providers: []*email.Provider{c.entry(f.srv.URL)}}
			s, err := email.New(cfg, testDigest(), testNotifiers(), email.Options{Clock: time.Now, TokenSecret: secret})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			if _, err := sendReport(s, "d-1"); err != nil {
				t.Fatalf("send: %v", err)
			}
			rec := f.last(t)
			var tag string
			var m struct {
				EmailTags  []struct{ Name, Value string } `json:"EmailTags"`
				CustomArgs map[string]string              `json:"custom_args"`
				Metadata   map[string]string              `json:"Metadata"`
				Tags       []struct{ Name, Value string } `json:"tags"`
			}
			switch c.kind {
			case email.KindMailgun:
				_, params, _ := mime.ParseMediaType(rec.r.Header.Get("Content-Type"))
				mr := multipart.NewReader(bytes.NewReader(rec.body), params["boundary"])
				for {
					p, err := mr.NextPart()
					if err != nil {
						break
					}
					if p.FormName() == "v:"+deliverytag.Field {
						b, _ := io.ReadAll(p)
						tag = string(b)
					}
				}
			default:
				if err := json.Unmarshal(rec.body, &m); err != nil {
					t.Fatal(err)
				}
				tag = m.CustomArgs[deliverytag.Field] + m.Metadata[deliverytag.Field]
				for _, x := range append(m.EmailTags, m.Tags...) {
					if x.Name == deliverytag.Field {
						tag += x.Value
					}
				}
			}
			if id, ok := signer.Delivery(tag); !ok || id != "d-1" {
				t.Fatalf("tag %q in %s", tag, rec.body)
			}
		})
	}
}
