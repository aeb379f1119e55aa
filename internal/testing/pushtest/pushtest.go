// Package pushtest runs a local Web Push service for tests and benchmarks:
// an HTTP server that plays the push service a browser subscribed at. It
// makes subscriptions the way a browser does (a fresh P-256 key pair and
// auth secret each), and for every message posted to one it checks the
// VAPID Authorization (RFC 8292: an ES256 JWT signed by the expected
// application server key, aud the server's origin, exp within 24 hours) and
// decrypts the body with the subscription's private key (RFC 8291,
// aes128gcm). What decrypts is recorded; what does not is answered 400 and
// recorded as a failure. It can be told to answer a status instead.
package pushtest

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Subscription is what a browser's PushSubscription.toJSON() gives: the
// endpoint and the keys, unpadded base64url.
type Subscription struct {
	Endpoint string `json:"endpoint"`
	Keys     struct {
		P256dh string `json:"p256dh"`
		Auth   string `json:"auth"`
	} `json:"keys"`
}

// Message is one push message the server decrypted.
type Message struct {
	Endpoint  string
	Plaintext []byte
	TTL       string
	Urgency   string
}

// Server is a running push service. Its methods are safe for concurrent use.
type Server struct {
	*httptest.Server
	vapidKey string // the application server key messages must be signed with

	mu       sync.Mutex
	subs     map[string]*sub // by path
	messages []Message
	failures []string
	answers  map[string][]int // queued statuses by path
	discard  bool
	count    atomic.Int64

	// verified holds the VAPID tokens whose signature and claims checked
	// out, with their expiry, as a push service caches them: the
	// application server reuses one token per push service for hours, and
	// verifying the same ECDSA signature on every request was a sixth of
	// the push benchmark's CPU, spent by this stand-in for a remote service.
	verified sync.Map // token -> time.Time (exp)
}

type sub struct {
	priv *ecdh.PrivateKey
	auth []byte
}

// Option configures a Server.
type Option func(*Server)

// WithDiscard counts decrypted messages without keeping them (benchmarks).
func WithDiscard() Option { return func(s *Server) { s.discard = true } }

// New starts a push service that accepts messages signed with the VAPID
// public key vapidPublic (unpadded base64url). Close it when done.
func New(vapidPublic string, opts ...Option) *Server {
	s := &Server{vapidKey: vapidPublic, subs: map[string]*sub{}, answers: map[string][]int{}}
	for _, o := range opts {
		o(s)
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Subscribe makes a new subscription at this push service, as a browser
// would: its endpoint and keys.
func (s *Server) Subscribe() Subscription {
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	auth := make([]byte, 16)
	_, _ = rand.Read(auth)
	id := make([]byte, 12)
	_, _ = rand.Read(id)
	path := "/push/" + base64.RawURLEncoding.EncodeToString(id)
	s.mu.Lock()
	s.subs[path] = &sub{priv: priv, auth: auth}
	s.mu.Unlock()
	var out Subscription
	out.Endpoint = s.URL + path
	out.Keys.P256dh = base64.RawURLEncoding.EncodeToString(priv.PublicKey().Bytes())
	out.Keys.Auth = base64.RawURLEncoding.EncodeToString(auth)
	return out
}

// Answer makes the next messages to endpoint answer the given statuses in
// turn (404, 410, 429, 500, ...) without being decrypted.
func (s *Server) Answer(endpoint string, statuses ...int) {
	path := strings.TrimPrefix(endpoint, s.URL)
	s.mu.Lock()
	s.answers[path] = append(s.answers[path], statuses...)
	s.mu.Unlock()
}

// Messages returns the decrypted messages in arrival order (nil with
// WithDiscard).
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.messages...)
}

// Count is how many messages decrypted.
func (s *Server) Count() int { return int(s.count.Load()) }

// Failures returns why messages were refused (bad VAPID, did not decrypt).
func (s *Server) Failures() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.failures...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	sb := s.subs[r.URL.Path]
	var status int
	if q := s.answers[r.URL.Path]; len(q) > 0 {
		status, s.answers[r.URL.Path] = q[0], q[1:]
	}
	s.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	switch {
	case r.Method != http.MethodPost:
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	case sb == nil:
		http.Error(w, "no such subscription", http.StatusNotFound)
		return
	case status != 0:
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "30")
		}
		w.WriteHeader(status)
		return
	}
	plain, err := s.check(r, body, sb)
	if err != nil {
		s.mu.Lock()
		s.failures = append(s.failures, err.Error())
		s.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.count.Add(1)
	if !s.discard {
		s.mu.Lock()
		s.messages = append(s.messages, Message{Endpoint: s.URL + r.URL.Path, Plaintext: plain,
			TTL: r.Header.Get("TTL"), Urgency: r.Header.Get("Urgency")})
		s.mu.Unlock()
	}
	w.WriteHeader(http.StatusCreated)
}

// check verifies the request's VAPID token and decrypts its body.
func (s *Server) check(r *http.Request, body []byte, sb *sub) ([]byte, error) {
	if err := s.checkVAPID(r.Header.Get("Authorization")); err != nil {
		return nil, fmt.Errorf("vapid: %w", err)
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "aes128gcm" {
		return nil, fmt.Errorf("Content-Encoding %q, want aes128gcm", ce)
	}
	if r.Header.Get("TTL") == "" {
		return nil, errors.New("no TTL header")
	}
	plain, err := Decrypt(body, sb.priv, sb.auth)
	if err != nil {
		return nil, fmt.Errorf("decrypt: %w", err)
	}
	return plain, nil
}

func (s *Server) checkVAPID(h string) error {
	rest, ok := strings.CutPrefix(h, "vapid ")
	if !ok {
		return fmt.Errorf("header Authorization %q is not vapid", h)
	}
	var t, k string
	for _, part := range strings.Split(rest, ",") {
		name, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch name {
		case "t":
			t = val
		case "k":
			k = val
		}
	}
	if k != s.vapidKey {
		return fmt.Errorf("k=%q is not the application server key", k)
	}
	if exp, ok := s.verified.Load(t); ok && time.Now().Before(exp.(time.Time)) {
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(k)
	if err != nil {
		return err
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), raw)
	if err != nil {
		return err
	}
	claims := jwt.MapClaims{}
	_, err = jwt.ParseWithClaims(t, claims, func(*jwt.Token) (any, error) { return pub, nil },
		jwt.WithValidMethods([]string{"ES256"}), jwt.WithExpirationRequired(), jwt.WithAudience(s.URL))
	if err != nil {
		return err
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp.After(time.Now().Add(24*time.Hour)) {
		return fmt.Errorf("exp %v is more than 24 hours away", exp)
	}
	if sub, _ := claims["sub"].(string); !strings.HasPrefix(sub, "mailto:") && !strings.HasPrefix(sub, "https:") {
		return fmt.Errorf("sub %q is neither a mailto nor an https URL", sub)
	}
	s.verified.Store(t, exp.Time)
	return nil
}

// Decrypt is the browser's half of RFC 8291: it decrypts an aes128gcm body
// sent to the subscription with private key priv and auth secret auth.
func Decrypt(body []byte, priv *ecdh.PrivateKey, auth []byte) ([]byte, error) {
	if len(body) < 21 {
		return nil, errors.New("body shorter than the aes128gcm header")
	}
	salt, rs, idlen := body[:16], binary.BigEndian.Uint32(body[16:20]), int(body[20])
	if idlen != 65 || len(body) < 21+idlen {
		return nil, fmt.Errorf("key id of %d bytes, want the 65-byte sender key", idlen)
	}
	asPublic := body[21 : 21+idlen]
	ct := body[21+idlen:]
	if uint32(len(ct)) > rs {
		return nil, errors.New("more than one record")
	}
	as, err := ecdh.P256().NewPublicKey(asPublic)
	if err != nil {
		return nil, err
	}
	secret, err := priv.ECDH(as)
	if err != nil {
		return nil, err
	}
	info := "WebPush: info\x00" + string(priv.PublicKey().Bytes()) + string(asPublic)
	ikm, err := hkdf.Key(sha256.New, secret, auth, info, 32)
	if err != nil {
		return nil, err
	}
	prk, _ := hkdf.Extract(sha256.New, ikm, salt)
	cek, _ := hkdf.Expand(sha256.New, prk, "Content-Encoding: aes128gcm\x00", 16)
	nonce, _ := hkdf.Expand(sha256.New, prk, "Content-Encoding: nonce\x00", 12)
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	rec, err := gcm.Open(nil, nonce, ct, nil)
	if err != nil {
		return nil, err
	}
	i := len(rec) - 1
	for i >= 0 && rec[i] == 0 {
		i--
	}
	if i < 0 || rec[i] != 0x02 {
		return nil, errors.New("no last-record delimiter")
	}
	return rec[:i], nil
}
