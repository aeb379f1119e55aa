package fcm

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Scope is the OAuth 2.0 scope an access token for sending messages needs.
const Scope = "https://www.googleapis.com/auth/firebase.messaging"

// GrantType is the OAuth 2.0 grant of a signed JWT assertion (RFC 7523).
const GrantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// ServiceAccount is what the channel uses of a service account's JSON key
// file.
type ServiceAccount struct {
	ProjectID    string `json:"project_id"`
	PrivateKeyID string `json:"private_key_id"`
	PrivateKey   string `json:"private_key"`
	ClientEmail  string `json:"client_email"`
	TokenURI     string `json:"token_uri"`

	key *rsa.PrivateKey
}

// LoadServiceAccount reads and checks a service account's JSON key file:
// type service_account, a client_email, and a private_key that is a PEM
// RSA key (PKCS#8, as Google issues them, or PKCS#1).
func LoadServiceAccount(path string) (*ServiceAccount, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the key file: %w", err)
	}
	return ParseServiceAccount(b)
}

// ParseServiceAccount is LoadServiceAccount on the file's content.
func ParseServiceAccount(b []byte) (*ServiceAccount, error) {
	var f struct {
		Type string `json:"type"`
		ServiceAccount
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("the key file is not a service account's JSON key: %w", err)
	}
	a := f.ServiceAccount
	switch {
	case f.Type != "service_account":
		return nil, fmt.Errorf("the key file's type is %q, want service_account", f.Type)
	case a.ClientEmail == "":
		return nil, errors.New("the key file has no client_email")
	case a.PrivateKey == "":
		return nil, errors.New("the key file has no private_key")
	}
	block, _ := pem.Decode([]byte(a.PrivateKey))
	if block == nil {
		return nil, errors.New("the key file's private_key is not PEM")
	}
	if key, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		a.key, _ = key.(*rsa.PrivateKey)
	} else if key, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		a.key = key
	}
	if a.key == nil {
		return nil, errors.New("the key file's private_key is not an RSA private key")
	}
	if a.TokenURI != "" {
		if u, err := url.Parse(a.TokenURI); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("the key file's token_uri %q is not an http(s) URL", a.TokenURI)
		}
	}
	return &a, nil
}

// assertionLifetime is the exp of an assertion after its iat (Google
// accepts at most an hour).
const assertionLifetime = time.Hour

// tokenSource hands out OAuth 2.0 access tokens for the service account:
// one is exchanged when none is cached or the cached one is about to expire,
// and sends that need one meanwhile wait for that exchange rather than
// start their own.
type tokenSource struct {
	client  *http.Client
	url     string
	account *ServiceAccount
	clock   func() time.Time
	timeout time.Duration

	mu        sync.Mutex
	token     string
	until     time.Time // the cached token is used until then
	inflight  *exchange // the exchange running, nil when none
	exchanges int       // how many exchanges were made (tests read it)
}

// exchange is one token exchange that several sends may wait for.
type exchange struct {
	done  chan struct{}
	token string
	err   error
}

// get returns a valid access token: the cached one, or the result of the
// exchange running (started when none is).
func (ts *tokenSource) get(ctx context.Context) (string, error) {
	ts.mu.Lock()
	if ts.token != "" && ts.clock().Before(ts.until) {
		tok := ts.token
		ts.mu.Unlock()
		return tok, nil
	}
	ex := ts.inflight
	if ex == nil {
		ex = &exchange{done: make(chan struct{})}
		ts.inflight = ex
		ts.exchanges++
		// The exchange is not any one send's: a send whose context ends
		// must not fail the others waiting for it.
		go ts.run(ex)
	}
	ts.mu.Unlock()
	select {
	case <-ex.done:
		return ex.token, ex.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// invalidate drops tok from the cache (FCM answered 401 to it), so the next
// get exchanges a new one. A token that was replaced already is left alone:
// the sends that met the 401 together refresh once.
func (ts *tokenSource) invalidate(tok string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.token == tok {
		ts.token = ""
	}
}

// count returns how many exchanges were started.
func (ts *tokenSource) count() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.exchanges
}

func (ts *tokenSource) run(ex *exchange) {
	ctx, cancel := context.WithTimeout(context.Background(), ts.timeout)
	defer cancel()
	tok, lifetime, err := ts.fetch(ctx)
	ts.mu.Lock()
	if err == nil {
		// Renewed shortly before it expires: a send never carries a token
		// that expires in flight.
		ts.token, ts.until = tok, ts.clock().Add(lifetime-min(5*time.Minute, lifetime/2))
	}
	ts.inflight = nil
	ts.mu.Unlock()
	ex.token, ex.err = tok, err
	close(ex.done)
}

// fetch signs an assertion and exchanges it for an access token.
func (ts *tokenSource) fetch(ctx context.Context) (string, time.Duration, error) {
	now := ts.clock()
	t := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"iss":   ts.account.ClientEmail,
		"scope": Scope,
		"aud":   ts.url,
		"iat":   now.Unix(),
		"exp":   now.Add(assertionLifetime).Unix(),
	})
	if ts.account.PrivateKeyID != "" {
		t.Header["kid"] = ts.account.PrivateKeyID
	}
	assertion, err := t.SignedString(ts.account.key)
	if err != nil {
		return "", 0, fmt.Errorf("sign the OAuth assertion: %w", err)
	}
	form := url.Values{"grant_type": {GrantType}, "assertion": {assertion}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.url, strings.NewReader(form.Encode()))
	if err != nil {
		return "", 0, fmt.Errorf("OAuth token request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("User-Agent", "notifyd")
	resp, err := ts.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", 0, fmt.Errorf("OAuth token exchange at %s: %w", host(ts.url), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("OAuth token exchange at %s: HTTP %d: %s", host(ts.url), resp.StatusCode, oneLine(body, 300))
	}
	var out struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
		TokenType   string `json:"token_type"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.AccessToken == "" {
		return "", 0, fmt.Errorf("OAuth token exchange at %s: no access_token in the answer", host(ts.url))
	}
	if out.TokenType != "" && !strings.EqualFold(out.TokenType, "bearer") {
		return "", 0, fmt.Errorf("OAuth token exchange at %s: token_type %q, want Bearer", host(ts.url), out.TokenType)
	}
	lifetime := time.Duration(out.ExpiresIn) * time.Second
	if lifetime <= 0 {
		lifetime = time.Hour
	}
	return out.AccessToken, lifetime, nil
}

// host is the scheme and host of raw, for errors.
func host(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Scheme + "://" + u.Host
	}
	return "(invalid url)"
}

// oneLine is the start of b as one line of valid UTF-8.
func oneLine(b []byte, n int) string {
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "\uFFFD")), " ")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}
