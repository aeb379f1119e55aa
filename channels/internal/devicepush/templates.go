package devicepush

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/templates"
)

// Templates are a notifier's mobile push templates, parsed: title
// (required), body and url.
type Templates struct {
	Title, Body, URL *template.Template
}

// CheckTemplates parses a notifier's title, body and url templates from its
// section n, reporting problems (a missing title, a syntax error, a
// template that does not render the example params) at their keys.
func CheckTemplates(p *config.Problems, n channels.NotifierSection, title, body, url string) Templates {
	if title == "" {
		p.Add(n.Section, "title", "must be set (every push notification has a title)")
	}
	t := Templates{Title: p.Text(n.Section, "title", title), Body: p.Text(n.Section, "body", body),
		URL: p.Text(n.Section, "url", url)}
	p.RenderCheck(n.Section, "title", t.Title, n.Example)
	p.RenderCheck(n.Section, "body", t.Body, n.Example)
	p.RenderCheck(n.Section, "url", t.URL, n.Example)
	return t
}

// ParseTemplates parses title, body and url for a program that builds a
// channel without the registry; prefix names their keys in errors
// ("notifiers.n.channels.fcm.").
func ParseTemplates(prefix, title, body, url string) (Templates, error) {
	p := config.Default().NewProblems()
	t := Templates{Title: p.Text(nil, prefix+"title", title), Body: p.Text(nil, prefix+"body", body),
		URL: p.Text(nil, prefix+"url", url)}
	if err := p.Err(); err != nil {
		return t, err
	}
	if t.Title == nil {
		return t, fmt.Errorf("%stitle is empty", prefix)
	}
	return t, nil
}

// Parts are a push notification's rendered parts, trimmed.
type Parts struct {
	Title, Body, URL string
}

// Render renders t over params. A url that renders must be an http(s) URL
// or an absolute path (the app opens it).
func (t Templates) Render(channel string, params map[string]any) (Parts, error) {
	var p Parts
	var err error
	if p.Title, err = templates.RenderText(t.Title, params); err != nil {
		return p, fmt.Errorf("render %s title: %w", channel, err)
	}
	if p.Body, err = templates.RenderText(t.Body, params); err != nil {
		return p, fmt.Errorf("render %s body: %w", channel, err)
	}
	if p.URL, err = templates.RenderText(t.URL, params); err != nil {
		return p, fmt.Errorf("render %s url: %w", channel, err)
	}
	p.Title, p.Body, p.URL = strings.TrimSpace(p.Title), strings.TrimSpace(p.Body), strings.TrimSpace(p.URL)
	if p.URL != "" {
		if u, err := url.Parse(p.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http" && !strings.HasPrefix(p.URL, "/")) {
			return p, fmt.Errorf("%s url %q is not an http(s) URL or an absolute path", channel, p.URL)
		}
	}
	return p, nil
}

// Preview returns p as the parts `notifyd preview` shows.
func (p Parts) Preview() []channels.Part {
	return []channels.Part{{Name: "title", Value: p.Title}, {Name: "body", Value: p.Body}, {Name: "url", Value: p.URL}}
}

// Fit returns p with its body cut short (ending with "…") until encode
// makes at most limit bytes of it, the most a push service takes. It fails
// when even an empty body is too long.
func Fit(p Parts, limit int, encode func(Parts) ([]byte, error)) (Parts, error) {
	for {
		b, err := encode(p)
		if err != nil {
			return p, err
		}
		if len(b) <= limit {
			return p, nil
		}
		if p.Body == "" {
			return p, fmt.Errorf("the push payload is %d bytes without a body, more than a push message carries (%d)", len(b), limit)
		}
		over := len(b) - limit + len("…")
		body := strings.TrimSuffix(p.Body, "…")
		cut := max(0, len(body)-max(over, 8))
		for cut > 0 && !utf8.RuneStart(body[cut]) {
			cut--
		}
		p.Body = body[:cut] + "…"
		if cut == 0 {
			p.Body = ""
		}
	}
}

// NewClient returns the HTTP client a mobile push channel talks to its push
// service with: TLS, HTTP/2 when the service offers it (APNs requires it),
// redirects not followed, timeout per request (connection, TLS, headers
// and body). caFile, when not "", is a PEM file of the certificate
// authorities to trust instead of the system's (a local stand-in of the
// service).
func NewClient(timeout time.Duration, caFile string) (*http.Client, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := LoadCA(caFile)
		if err != nil {
			return nil, err
		}
		tlsCfg.RootCAs = pool
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		TLSClientConfig:       tlsCfg,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}, nil
}

// LoadCA reads a PEM file of CA certificates into a pool.
func LoadCA(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New("no PEM certificate in the CA file")
	}
	return pool, nil
}
