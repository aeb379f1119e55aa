// Package mobilepushtest runs local stand-ins of the mobile push services
// for tests and benchmarks: FCM (the OAuth 2.0 token endpoint and the HTTP
// v1 send endpoint) and APNs (HTTP/2 with provider tokens). Both are TLS
// servers on 127.0.0.1 that check the protocol as the real services do —
// FCM verifies the service account's RS256 assertion and the access token
// of every message, APNs the ES256 provider token and the headers of every
// push — and record what they accepted. What breaks the protocol is
// answered with the service's error and recorded as a failure; a test can
// also queue answers (UNREGISTERED, 410, BadDeviceToken, 429 with
// Retry-After, 5xx) for a device, or make the service hang.
package mobilepushtest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FCMScope is the scope an assertion must ask for.
const FCMScope = "https://www.googleapis.com/auth/firebase.messaging"

// FCMMessage is one message FCM accepted.
type FCMMessage struct {
	Token string
	Title string
	Body  string
	Data  map[string]string
	// Proto is the request's protocol ("HTTP/2.0").
	Proto string
}

// Answer is a queued answer for a device: an HTTP status, the service's
// error code (FCM's errorCode, APNs's reason) and a Retry-After header
// ("" for none).
type Answer struct {
	Status     int
	Reason     string
	RetryAfter string
}

// FCM is a running FCM stand-in. Its methods are safe for concurrent use.
type FCM struct {
	*httptest.Server
	// ProjectID is the project its send endpoint serves.
	ProjectID string
	// ClientEmail is the service account's.
	ClientEmail string
	key         *rsa.PrivateKey
	keyID       string
	lifetime    time.Duration
	discard     bool
	clock       func() time.Time

	mu        sync.Mutex
	devices   map[string]bool
	tokens    map[string]time.Time // access token -> expiry
	answers   map[string][]Answer
	messages  []FCMMessage
	failures  []string
	hang      chan struct{} // non-nil: requests wait for it to close
	exchanges atomic.Int64
	count     atomic.Int64
	held      atomic.Int64
}

// FCMOption configures an FCM.
type FCMOption func(*FCM)

// WithTokenLifetime makes the access tokens it issues expire after d
// (expires_in), default an hour.
func WithTokenLifetime(d time.Duration) FCMOption { return func(f *FCM) { f.lifetime = d } }

// WithFCMDiscard counts accepted messages without keeping them (benchmarks).
func WithFCMDiscard() FCMOption { return func(f *FCM) { f.discard = true } }

// WithFCMClock makes the server judge assertions and access tokens by clock
// (the sender's, in a test that moves time).
func WithFCMClock(clock func() time.Time) FCMOption { return func(f *FCM) { f.clock = clock } }

// NewFCM starts an FCM stand-in for project projectID with a new service
// account (an RSA key of its own). Close it when done.
func NewFCM(projectID string, opts ...FCMOption) *FCM {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	f := &FCM{ProjectID: projectID, ClientEmail: "notifyd@" + projectID + ".iam.gserviceaccount.test", key: key,
		keyID: randomHex(20), lifetime: time.Hour, devices: map[string]bool{}, tokens: map[string]time.Time{},
		answers: map[string][]Answer{}, clock: time.Now}
	for _, o := range opts {
		o(f)
	}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.Server.EnableHTTP2 = true
	f.Server.StartTLS()
	return f
}

// TokenURL is where assertions are exchanged for access tokens.
func (f *FCM) TokenURL() string { return f.URL + "/token" }

// ServiceAccountJSON is the service account's JSON key file, naming this
// server's token URL as its token_uri.
func (f *FCM) ServiceAccountJSON() []byte {
	der, err := x509.MarshalPKCS8PrivateKey(f.key)
	if err != nil {
		panic(err)
	}
	b, _ := json.MarshalIndent(map[string]string{
		"type":           "service_account",
		"project_id":     f.ProjectID,
		"private_key_id": f.keyID,
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   f.ClientEmail,
		"client_id":      "1000000000000000000001",
		"token_uri":      f.TokenURL(),
	}, "", "  ")
	return b
}

// Register makes a new device registration token this service knows, as
// an Android app install gets one.
func (f *FCM) Register() string {
	tok := randomB64(16) + ":APA91b" + randomB64(100)
	f.mu.Lock()
	f.devices[tok] = true
	f.mu.Unlock()
	return tok
}

// Answer makes the next messages to token get the given answers in turn,
// before any check.
func (f *FCM) Answer(token string, answers ...Answer) {
	f.mu.Lock()
	f.answers[token] = append(f.answers[token], answers...)
	f.mu.Unlock()
}

// Unregister forgets token, as FCM does when the app is uninstalled: its
// messages are answered 404 UNREGISTERED.
func (f *FCM) Unregister(token string) {
	f.mu.Lock()
	delete(f.devices, token)
	f.mu.Unlock()
}

// RevokeTokens forgets every access token issued: the next message with
// one is answered 401, as when a token expired early.
func (f *FCM) RevokeTokens() {
	f.mu.Lock()
	clear(f.tokens)
	f.mu.Unlock()
}

// Hang makes every request wait until Release (or Close).
func (f *FCM) Hang() {
	f.mu.Lock()
	if f.hang == nil {
		f.hang = make(chan struct{})
	}
	f.mu.Unlock()
}

// Release lets hung requests go on, and new ones through.
func (f *FCM) Release() {
	f.mu.Lock()
	if f.hang != nil {
		close(f.hang)
		f.hang = nil
	}
	f.mu.Unlock()
}

// Close releases hung requests and stops the server.
func (f *FCM) Close() {
	f.Release()
	f.Server.Close()
}

// Messages returns the accepted messages in arrival order (nil with
// WithFCMDiscard).
func (f *FCM) Messages() []FCMMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]FCMMessage(nil), f.messages...)
}

// Count is how many messages were accepted.
func (f *FCM) Count() int { return int(f.count.Load()) }

// Exchanges is how many access tokens were issued.
func (f *FCM) Exchanges() int { return int(f.exchanges.Load()) }

// Held is how many requests arrived while the server hung.
func (f *FCM) Held() int { return int(f.held.Load()) }

// Failures returns why requests were refused for breaking the protocol (a
// bad assertion, an unknown access token, a malformed message).
func (f *FCM) Failures() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.failures...)
}

func (f *FCM) fail(w http.ResponseWriter, status int, code, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.mu.Lock()
	f.failures = append(f.failures, msg)
	f.mu.Unlock()
	writeFCMError(w, status, code, "", msg)
}

func writeFCMError(w http.ResponseWriter, status int, statusName, errorCode, msg string) {
	e := map[string]any{"code": status, "message": msg, "status": statusName}
	if errorCode != "" {
		e["details"] = []any{map[string]any{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
			"errorCode": errorCode}}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": e})
}

func (f *FCM) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	hang := f.hang
	f.mu.Unlock()
	if hang != nil {
		f.held.Add(1)
		select {
		case <-hang:
		case <-r.Context().Done():
			return
		}
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/token":
		f.serveToken(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/projects/"+f.ProjectID+"/messages:send":
		f.serveSend(w, r)
	default:
		f.fail(w, http.StatusNotFound, "NOT_FOUND", "%s %s: no such endpoint", r.Method, r.URL.Path)
	}
}

// serveToken is the OAuth 2.0 token endpoint: a JWT bearer grant whose
// assertion the service account signed.
func (f *FCM) serveToken(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
		f.failToken(w, "Content-Type %q, want application/x-www-form-urlencoded", ct)
		return
	}
	if err := r.ParseForm(); err != nil {
		f.failToken(w, "form: %v", err)
		return
	}
	if g := r.PostForm.Get("grant_type"); g != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		f.failToken(w, "grant_type %q", g)
		return
	}
	if err := f.checkAssertion(r.PostForm.Get("assertion")); err != nil {
		f.failToken(w, "assertion: %v", err)
		return
	}
	tok := "ya29." + randomB64(48)
	f.mu.Lock()
	f.tokens[tok] = f.clock().Add(f.lifetime)
	f.mu.Unlock()
	f.exchanges.Add(1)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "expires_in": int(f.lifetime / time.Second),
		"token_type": "Bearer"})
}

func (f *FCM) failToken(w http.ResponseWriter, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.mu.Lock()
	f.failures = append(f.failures, "token: "+msg)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_grant", "error_description": msg})
}

// checkAssertion verifies the RS256 signature with the service account's
// public key and the claims Google checks.
func (f *FCM) checkAssertion(assertion string) error {
	claims := jwt.MapClaims{}
	t, err := jwt.ParseWithClaims(assertion, claims, func(*jwt.Token) (any, error) { return &f.key.PublicKey, nil },
		jwt.WithValidMethods([]string{"RS256"}), jwt.WithExpirationRequired(), jwt.WithIssuedAt(),
		jwt.WithAudience(f.TokenURL()), jwt.WithIssuer(f.ClientEmail), jwt.WithTimeFunc(f.clock))
	if err != nil {
		return err
	}
	if kid, _ := t.Header["kid"].(string); kid != f.keyID {
		return fmt.Errorf("kid %q is not the key's id %q", kid, f.keyID)
	}
	if scope, _ := claims["scope"].(string); scope != FCMScope {
		return fmt.Errorf("scope %q, want %s", scope, FCMScope)
	}
	iat, err := claims.GetIssuedAt()
	if err != nil || iat == nil {
		return errors.New("no iat")
	}
	exp, _ := claims.GetExpirationTime()
	if exp.Sub(iat.Time) > time.Hour {
		return fmt.Errorf("exp is %s after iat, more than an hour", exp.Sub(iat.Time))
	}
	return nil
}

// fcmRequest is the HTTP v1 send request, decoded strictly.
type fcmRequest struct {
	Message struct {
		Token        string `json:"token"`
		Notification struct {
			Title string `json:"title"`
			Body  string `json:"body"`
		} `json:"notification"`
		Data map[string]string `json:"data"`
	} `json:"message"`
}

func (f *FCM) serveSend(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	f.mu.Lock()
	exp, known := f.tokens[tok]
	f.mu.Unlock()
	if !ok || !known || f.clock().After(exp) {
		// Not a protocol failure when the token was revoked; the sender
		// is expected to get a new one.
		writeFCMError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "", "Request had invalid authentication credentials.")
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		f.fail(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Content-Type %q, want application/json", ct)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return
	}
	if len(body) > 4096 {
		f.fail(w, http.StatusBadRequest, "INVALID_ARGUMENT", "message of %d bytes, over 4096", len(body))
		return
	}
	var req fcmRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		f.fail(w, http.StatusBadRequest, "INVALID_ARGUMENT", "message: %v", err)
		return
	}
	m := req.Message
	for _, k := range []string{"id", "notifier", "key", "url"} {
		if _, ok := m.Data[k]; !ok {
			f.fail(w, http.StatusBadRequest, "INVALID_ARGUMENT", "message.data has no %q", k)
			return
		}
	}
	if m.Notification.Title == "" {
		f.fail(w, http.StatusBadRequest, "INVALID_ARGUMENT", "message.notification has no title")
		return
	}
	f.mu.Lock()
	var answer *Answer
	if q := f.answers[m.Token]; len(q) > 0 {
		answer, f.answers[m.Token] = &q[0], q[1:]
	}
	registered := f.devices[m.Token]
	f.mu.Unlock()
	if answer != nil {
		if answer.RetryAfter != "" {
			w.Header().Set("Retry-After", answer.RetryAfter)
		}
		writeFCMError(w, answer.Status, statusName(answer.Status), answer.Reason, "queued answer")
		return
	}
	if !registered {
		writeFCMError(w, http.StatusNotFound, "NOT_FOUND", "UNREGISTERED", "Requested entity was not found.")
		return
	}
	f.count.Add(1)
	if !f.discard {
		f.mu.Lock()
		f.messages = append(f.messages, FCMMessage{Token: m.Token, Title: m.Notification.Title, Body: m.Notification.Body,
			Data: m.Data, Proto: r.Proto})
		f.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"name": "projects/" + f.ProjectID + "/messages/" + strconv.FormatInt(f.count.Load(), 10)})
}

// statusName is the google.rpc status of an HTTP status, as FCM names it.
func statusName(code int) string {
	switch code {
	case 400:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 429:
		return "RESOURCE_EXHAUSTED"
	case 503:
		return "UNAVAILABLE"
	default:
		return "INTERNAL"
	}
}

// WriteCA writes the server's certificate as a PEM file in dir (a
// channel's ca_file) and returns its path.
func WriteCA(s *httptest.Server, dir string) (string, error) {
	path := filepath.Join(dir, "ca-"+randomHex(4)+".pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	return path, os.WriteFile(path, b, 0o600)
}

func randomB64(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}
