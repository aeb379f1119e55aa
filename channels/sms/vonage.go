package sms

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/safehttp"
)

// VonageBaseURL is Vonage's API host; the Messages API is its /v1/messages.
const VonageBaseURL = "https://api.nexmo.com"

// VonagePath is the Messages API's send path.
const VonagePath = "/v1/messages"

// jwtLifetime is how long a Vonage JWT is valid; a token is reused until
// jwtRenew before it expires, so only one request in many signs.
const (
	jwtLifetime = 15 * time.Minute
	jwtRenew    = 2 * time.Minute
)

// vonageAPI is Vonage's Messages API for one application, authenticated with
// a JWT (RS256) signed by the application's private key.
type vonageAPI struct {
	name, key, endpoint, app, from string
	signer                         *rsa.PrivateKey
	client                         *http.Client
	clock                          func() time.Time

	mu      sync.Mutex
	token   string
	expires time.Time
}

func newVonage(pc *Provider, key, base string, client *http.Client, clock func() time.Time) (*vonageAPI, error) {
	if pc.ApplicationID == "" || pc.PrivateKey == "" || pc.From == "" {
		return nil, errors.New("needs application_id, private_key and from")
	}
	signer, err := parsePrivateKey(pc.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("private_key: %w", err)
	}
	if base == "" {
		base = VonageBaseURL
	}
	return &vonageAPI{name: pc.DisplayName(), key: key, endpoint: base + VonagePath, app: pc.ApplicationID,
		from: strings.TrimPrefix(pc.From, "+"), signer: signer, client: client, clock: clock}, nil
}

// parsePrivateKey reads an RSA private key in PEM, PKCS #8 or PKCS #1. A
// key given through an environment variable with its line breaks written
// as \n is read too.
func parsePrivateKey(s string) (*rsa.PrivateKey, error) {
	s = strings.ReplaceAll(s, `\n`, "\n")
	block, _ := pem.Decode([]byte(s))
	if block == nil {
		return nil, errors.New("want the application's private key in PEM (-----BEGIN PRIVATE KEY-----)")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("read the private key: %w", err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("want an RSA private key (Vonage signs with RS256)")
	}
	return rk, nil
}

// jwt returns a valid token, signing a new one when the last is about to
// expire.
func (a *vonageAPI) jwt() (string, error) {
	now := a.clock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.token != "" && now.Add(jwtRenew).Before(a.expires) {
		return a.token, nil
	}
	var jti [16]byte
	_, _ = rand.Read(jti[:])
	exp := now.Add(jwtLifetime)
	claims, err := json.Marshal(map[string]any{"application_id": a.app, "iat": now.Unix(), "exp": exp.Unix(),
		"jti": hex.EncodeToString(jti[:])})
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	signed := enc.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, a.signer, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("sign the JWT: %w", err)
	}
	a.token, a.expires = signed+"."+enc.EncodeToString(sig), exp
	return a.token, nil
}

// vonageProblem is the Messages API's error body (RFC 7807).
type vonageProblem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
}

// send posts the text and classifies the answer: 202 is sent, with its
// message_uuid; 400 and 422 (invalid parameters, such as the number)
// refuse the text; 401 and 403 (the credentials) and 402 (the account's
// balance) are this provider's fault, temporary; 429 is rate limited;
// 5xx temporary.
func (a *vonageAPI) send(ctx context.Context, to, text string) (string, int, error) {
	token, err := a.jwt()
	if err != nil {
		return "", 0, channels.Temporary(fmt.Errorf("%s: %w", a.name, err), 0)
	}
	body, err := json.Marshal(map[string]string{"message_type": "text", "channel": "sms",
		"to": strings.TrimPrefix(to, "+"), "from": a.from, "text": text})
	if err != nil {
		return "", 0, channels.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.endpoint, bytes.NewReader(body))
	if err != nil {
		return "", 0, channels.Permanent(fmt.Errorf("sms: build request: %w", err))
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	dest := a.name + " (vonage messages api)"
	code, header, raw, err := post(ctx, a.client, req, dest)
	if err != nil {
		return "", 0, err
	}
	if code/100 == 2 {
		var ok struct {
			UUID string `json:"message_uuid"`
		}
		if json.Unmarshal(raw, &ok) != nil || ok.UUID == "" {
			return "", 0, channels.Temporary(fmt.Errorf("%s answered %d without a message_uuid", dest, code), 0)
		}
		return ok.UUID, 0, nil
	}
	var pr vonageProblem
	_ = json.Unmarshal(raw, &pr)
	what := fmt.Sprintf("%s: HTTP %d", dest, code)
	if pr.Title != "" {
		what += ": " + pr.Title
	}
	if pr.Detail != "" {
		what += ": " + pr.Detail
	}
	err = errors.New(what)
	switch {
	case code == http.StatusTooManyRequests:
		return "", 0, channels.RateLimited(err, safehttp.ParseRetryAfter(header.Get("Retry-After"), a.clock()))
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return "", 0, channels.Temporary(fmt.Errorf("%w: Vonage refused the credentials: check %s.application_id and private_key", err, a.key), 0)
	case code == http.StatusPaymentRequired:
		return "", 0, channels.Temporary(fmt.Errorf("%w: the Vonage account's balance is too low", err), 0)
	case code == http.StatusBadRequest || code == http.StatusUnprocessableEntity:
		return "", 0, channels.Permanent(err)
	}
	return "", 0, channels.Temporary(err, 0)
}
