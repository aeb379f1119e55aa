package mobilepushtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// APNsMessage is one push APNs accepted.
type APNsMessage struct {
	Token      string
	Topic      string
	PushType   string
	CollapseID string
	APNSID     string
	// Payload is the JSON body, decoded.
	Payload map[string]any
	Proto   string
}

// Title and Body are the payload's aps.alert.title and body.
func (m APNsMessage) Title() string { return m.alert("title") }

// Body is the payload's aps.alert.body.
func (m APNsMessage) Body() string { return m.alert("body") }

func (m APNsMessage) alert(k string) string {
	aps, _ := m.Payload["aps"].(map[string]any)
	alert, _ := aps["alert"].(map[string]any)
	s, _ := alert[k].(string)
	return s
}

// APNs is a running APNs stand-in: HTTP/2 over TLS only. Its methods are
// safe for concurrent use.
type APNs struct {
	*httptest.Server
	// TeamID and KeyID are what provider tokens must carry (iss, kid).
	TeamID, KeyID string
	key           *ecdsa.PrivateKey
	discard       bool
	clock         func() time.Time

	mu       sync.Mutex
	devices  map[string]string // token -> topic (bundle id)
	answers  map[string][]Answer
	messages []APNsMessage
	failures []string
	hang     chan struct{}
	count    atomic.Int64
	held     atomic.Int64
	verified sync.Map // provider token -> iat, once checked
	tokens   sync.Map // distinct provider tokens seen
}

// APNsOption configures an APNs.
type APNsOption func(*APNs)

// WithAPNsDiscard counts accepted pushes without keeping them (benchmarks).
func WithAPNsDiscard() APNsOption { return func(a *APNs) { a.discard = true } }

// WithAPNsClock makes the server judge a provider token's age by clock
// (the sender's, in a test that moves time).
func WithAPNsClock(clock func() time.Time) APNsOption { return func(a *APNs) { a.clock = clock } }

// NewAPNs starts an APNs stand-in for team teamID with a new signing key
// keyID (P-256 of its own). Close it when done.
func NewAPNs(teamID, keyID string, opts ...APNsOption) *APNs {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	a := &APNs{TeamID: teamID, KeyID: keyID, key: key, devices: map[string]string{}, answers: map[string][]Answer{},
		clock: time.Now}
	for _, o := range opts {
		o(a)
	}
	a.Server = httptest.NewUnstartedServer(http.HandlerFunc(a.serve))
	a.Server.EnableHTTP2 = true
	a.Server.StartTLS()
	return a
}

// KeyPEM is the signing key as Apple hands it out: a .p8 file, PEM
// PKCS#8.
func (a *APNs) KeyPEM() []byte {
	der, err := x509.MarshalPKCS8PrivateKey(a.key)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// Register makes a new device token of an install of the app topic (its
// bundle id), as iOS gives one to the app.
func (a *APNs) Register(topic string) string {
	tok := randomHex(32)
	a.mu.Lock()
	a.devices[tok] = topic
	a.mu.Unlock()
	return tok
}

// Answer makes the next pushes to token get the given answers in turn
// (410 Unregistered, 400 BadDeviceToken, 429 TooManyRequests, 500, ...),
// after the provider token and headers are checked.
func (a *APNs) Answer(token string, answers ...Answer) {
	a.mu.Lock()
	a.answers[token] = append(a.answers[token], answers...)
	a.mu.Unlock()
}

// Hang makes every request wait until Release (or Close).
func (a *APNs) Hang() {
	a.mu.Lock()
	if a.hang == nil {
		a.hang = make(chan struct{})
	}
	a.mu.Unlock()
}

// Release lets hung requests go on, and new ones through.
func (a *APNs) Release() {
	a.mu.Lock()
	if a.hang != nil {
		close(a.hang)
		a.hang = nil
	}
	a.mu.Unlock()
}

// Close releases hung requests and stops the server.
func (a *APNs) Close() {
	a.Release()
	a.Server.Close()
}

// Messages returns the accepted pushes in arrival order (nil with
// WithAPNsDiscard).
func (a *APNs) Messages() []APNsMessage {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]APNsMessage(nil), a.messages...)
}

// Count is how many pushes were accepted.
func (a *APNs) Count() int { return int(a.count.Load()) }

// Held is how many requests arrived while the server hung.
func (a *APNs) Held() int { return int(a.held.Load()) }

// ProviderTokens is how many distinct provider tokens the pushes carried.
func (a *APNs) ProviderTokens() int {
	n := 0
	a.tokens.Range(func(any, any) bool { n++; return true })
	return n
}

// Failures returns why requests were refused for breaking the protocol.
func (a *APNs) Failures() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.failures...)
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func (a *APNs) fail(w http.ResponseWriter, status int, reason, format string, args ...any) {
	a.mu.Lock()
	a.failures = append(a.failures, reason+": "+fmt.Sprintf(format, args...))
	a.mu.Unlock()
	writeAPNsError(w, status, reason, "")
}

func writeAPNsError(w http.ResponseWriter, status int, reason, retryAfter string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	body := map[string]any{"reason": reason}
	if status == http.StatusGone {
		body["timestamp"] = time.Now().UnixMilli()
	}
	_ = json.NewEncoder(w).Encode(body)
}

func (a *APNs) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	hang := a.hang
	a.mu.Unlock()
	if hang != nil {
		a.held.Add(1)
		select {
		case <-hang:
		case <-r.Context().Done():
			return
		}
	}
	if r.ProtoMajor != 2 {
		a.fail(w, http.StatusBadRequest, "BadProtocol", "%s, APNs speaks HTTP/2 only", r.Proto)
		return
	}
	token, ok := strings.CutPrefix(r.URL.Path, "/3/device/")
	if r.Method != http.MethodPost || !ok {
		a.fail(w, http.StatusNotFound, "BadPath", "%s %s", r.Method, r.URL.Path)
		return
	}
	if err := a.checkProviderToken(r.Header.Get("authorization")); errors.Is(err, errExpired) {
		// Not a protocol failure: the sender is expected to sign a new one.
		writeAPNsError(w, http.StatusForbidden, "ExpiredProviderToken", "")
		return
	} else if err != nil {
		a.fail(w, http.StatusForbidden, "InvalidProviderToken", "%v", err)
		return
	}
	topic := r.Header.Get("apns-topic")
	switch {
	case topic == "":
		a.fail(w, http.StatusBadRequest, "MissingTopic", "no apns-topic")
		return
	case r.Header.Get("apns-push-type") != "alert":
		a.fail(w, http.StatusBadRequest, "InvalidPushType", "apns-push-type %q, want alert", r.Header.Get("apns-push-type"))
		return
	case len(r.Header.Get("apns-collapse-id")) > 64:
		a.fail(w, http.StatusBadRequest, "BadCollapseId", "apns-collapse-id of %d bytes", len(r.Header.Get("apns-collapse-id")))
		return
	case r.Header.Get("apns-id") != "" && !uuidRE.MatchString(r.Header.Get("apns-id")):
		a.fail(w, http.StatusBadRequest, "BadMessageId", "apns-id %q", r.Header.Get("apns-id"))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return
	}
	var payload map[string]any
	if len(body) > 4096 {
		a.fail(w, http.StatusRequestEntityTooLarge, "PayloadTooLarge", "%d bytes", len(body))
		return
	}
	if err := json.Unmarshal(body, &payload); err != nil {
		a.fail(w, http.StatusBadRequest, "PayloadEmpty", "payload: %v", err)
		return
	}
	m := APNsMessage{Token: token, Topic: topic, PushType: r.Header.Get("apns-push-type"),
		CollapseID: r.Header.Get("apns-collapse-id"), APNSID: r.Header.Get("apns-id"), Payload: payload, Proto: r.Proto}
	if m.Title() == "" {
		a.fail(w, http.StatusBadRequest, "PayloadEmpty", "no aps.alert.title")
		return
	}
	for _, k := range []string{"id", "notifier", "key", "url"} {
		if _, ok := payload[k].(string); !ok {
			a.fail(w, http.StatusBadRequest, "PayloadEmpty", "no %q in the payload", k)
			return
		}
	}
	a.mu.Lock()
	var answer *Answer
	if q := a.answers[token]; len(q) > 0 {
		answer, a.answers[token] = &q[0], q[1:]
	}
	want, known := a.devices[token]
	a.mu.Unlock()
	switch {
	case answer != nil:
		writeAPNsError(w, answer.Status, answer.Reason, answer.RetryAfter)
		return
	case !known:
		writeAPNsError(w, http.StatusBadRequest, "BadDeviceToken", "")
		return
	case topic != want:
		writeAPNsError(w, http.StatusBadRequest, "DeviceTokenNotForTopic", "")
		return
	}
	a.count.Add(1)
	if !a.discard {
		a.mu.Lock()
		a.messages = append(a.messages, m)
		a.mu.Unlock()
	}
	if m.APNSID != "" {
		w.Header().Set("apns-id", m.APNSID)
	}
	w.WriteHeader(http.StatusOK)
}

// checkProviderToken verifies an ES256 provider token: signed with the
// team's key, kid the key's id, iss the team, iat within the last hour.
func (a *APNs) checkProviderToken(h string) error {
	tok, ok := strings.CutPrefix(h, "bearer ")
	if !ok {
		return fmt.Errorf("authorization %q is not a bearer token", h)
	}
	a.tokens.Store(tok, true)
	if iat, ok := a.verified.Load(tok); ok {
		return a.fresh(iat.(time.Time))
	}
	claims := jwt.MapClaims{}
	t, err := jwt.ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) { return &a.key.PublicKey, nil },
		jwt.WithValidMethods([]string{"ES256"}), jwt.WithIssuer(a.TeamID), jwt.WithTimeFunc(a.clock))
	if err != nil {
		return err
	}
	if kid, _ := t.Header["kid"].(string); kid != a.KeyID {
		return fmt.Errorf("kid %q, want %q", kid, a.KeyID)
	}
	iat, err := claims.GetIssuedAt()
	if err != nil || iat == nil {
		return fmt.Errorf("no iat")
	}
	if err := a.fresh(iat.Time); err != nil {
		return err
	}
	a.verified.Store(tok, iat.Time)
	return nil
}

// errExpired is a provider token older than an hour.
var errExpired = errors.New("ExpiredProviderToken")

// fresh refuses a provider token issued more than an hour ago
// (errExpired) or in the future.
func (a *APNs) fresh(iat time.Time) error {
	switch age := a.clock().Sub(iat); {
	case age > time.Hour:
		return fmt.Errorf("iat is %s old: %w", age.Round(time.Second), errExpired)
	case age < -time.Minute:
		return fmt.Errorf("iat is %s in the future", (-age).Round(time.Second))
	}
	return nil
}
