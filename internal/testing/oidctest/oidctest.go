// Package oidctest is a minimal OpenID Connect provider for tests, served
// on 127.0.0.1: discovery, a JWKS with a generated RSA key, an authorize
// endpoint that signs in whoever Provider.User names at once and redirects
// back with a code, and a token endpoint that checks the client's secret,
// the redirect URI and the PKCE (S256) verifier before it issues an RS256
// ID token carrying the authorize request's nonce.
package oidctest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"
)

// User is who the provider signs in.
type User struct {
	Subject string
	Email   string
	Name    string
	Groups  []string
}

// Provider is the fake identity provider.
type Provider struct {
	URL          string // the issuer
	ClientID     string
	ClientSecret string

	key *rsa.PrivateKey
	srv *httptest.Server

	mu    sync.Mutex
	user  User
	codes map[string]grant
	// Exchanges counts token requests, refusals included.
	exchanges int
	// NonceOverride, when set, is put in ID tokens in place of the
	// request's nonce (to test that the client checks it).
	nonceOverride string
}

type grant struct {
	challenge, redirect, nonce string
	user                       User
}

// New starts a provider for the client id and secret; it stops with t.
func New(t testing.TB, clientID, clientSecret string) *Provider {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{ClientID: clientID, ClientSecret: clientSecret, key: key, codes: map[string]grant{},
		user: User{Subject: "sub-1", Email: "ada@example.test", Name: "Ada"}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /jwks", p.jwks)
	mux.HandleFunc("GET /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	p.URL = p.srv.URL
	return p
}

// SetUser sets who the next sign-in is.
func (p *Provider) SetUser(u User) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.user = u
}

// SetNonce makes ID tokens carry nonce instead of the request's ("" undoes it).
func (p *Provider) SetNonce(nonce string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nonceOverride = nonce
}

// Exchanges is how many token requests the provider got.
func (p *Provider) Exchanges() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exchanges
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (p *Provider) discovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, map[string]any{
		"issuer": p.URL, "authorization_endpoint": p.URL + "/authorize", "token_endpoint": p.URL + "/token",
		"jwks_uri": p.URL + "/jwks", "response_types_supported": []string{"code"}, "subject_types_supported": []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"}, "code_challenge_methods_supported": []string{"S256"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
	})
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func (p *Provider) jwks(w http.ResponseWriter, _ *http.Request) {
	pub := p.key.PublicKey
	writeJSON(w, 200, map[string]any{"keys": []map[string]any{{"kty": "RSA", "kid": "k1", "alg": "RS256", "use": "sig",
		"n": b64(pub.N.Bytes()), "e": b64(big.NewInt(int64(pub.E)).Bytes())}}})
}

// authorize signs the current user in and redirects back with a code; it
// refuses a request without an S256 code challenge.
func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("client_id") != p.ClientID || q.Get("response_type") != "code" || q.Get("redirect_uri") == "" {
		http.Error(w, "bad authorize request", http.StatusBadRequest)
		return
	}
	if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" {
		http.Error(w, "PKCE S256 required", http.StatusBadRequest)
		return
	}
	var c [16]byte
	_, _ = rand.Read(c[:])
	code := b64(c[:])
	p.mu.Lock()
	p.codes[code] = grant{challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri"), nonce: q.Get("nonce"), user: p.user}
	p.mu.Unlock()
	u, err := url.Parse(q.Get("redirect_uri"))
	if err != nil {
		http.Error(w, "bad redirect_uri", http.StatusBadRequest)
		return
	}
	v := u.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	u.RawQuery = v.Encode()
	http.Redirect(w, r, u.String(), http.StatusFound)
}

// token exchanges a code once: the client's credentials, the redirect URI
// and the PKCE verifier must match.
func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.exchanges++
	p.mu.Unlock()
	if err := r.ParseForm(); err != nil {
		writeJSON(w, 400, map[string]string{"error": "invalid_request"})
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != p.ClientID || secret != p.ClientSecret {
		writeJSON(w, 401, map[string]string{"error": "invalid_client"})
		return
	}
	p.mu.Lock()
	g, found := p.codes[r.PostForm.Get("code")]
	delete(p.codes, r.PostForm.Get("code"))
	override := p.nonceOverride
	p.mu.Unlock()
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	if !found || r.PostForm.Get("grant_type") != "authorization_code" || r.PostForm.Get("redirect_uri") != g.redirect {
		writeJSON(w, 400, map[string]string{"error": "invalid_grant"})
		return
	}
	if r.PostForm.Get("code_verifier") == "" || b64(sum[:]) != g.challenge {
		writeJSON(w, 400, map[string]string{"error": "invalid_grant", "error_description": "PKCE verification failed"})
		return
	}
	nonce := g.nonce
	if override != "" {
		nonce = override
	}
	now := time.Now()
	claims := map[string]any{"iss": p.URL, "sub": g.user.Subject, "aud": p.ClientID, "iat": now.Unix(),
		"exp": now.Add(5 * time.Minute).Unix(), "nonce": nonce, "email": g.user.Email, "name": g.user.Name}
	if g.user.Groups != nil {
		claims["groups"] = g.user.Groups
	}
	writeJSON(w, 200, map[string]any{"access_token": "at-" + b64(sum[:8]), "token_type": "Bearer", "expires_in": 300,
		"id_token": p.sign(claims)})
}

// sign makes an RS256 JWT of claims with the provider's key.
func (p *Provider) sign(claims map[string]any) string {
	h, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": "k1", "typ": "JWT"})
	c, _ := json.Marshal(claims)
	in := b64(h) + "." + b64(c)
	sum := sha256.Sum256([]byte(in))
	sig, err := rsa.SignPKCS1v15(rand.Reader, p.key, crypto.SHA256, sum[:])
	if err != nil {
		panic(err)
	}
	return in + "." + b64(sig)
}
