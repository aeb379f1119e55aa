package httpapi

import (
	"slices"
	"testing"

	"github.com/notifyd/notifyd/config"
)

// TestLoginState: the login cookie carries state, nonce and PKCE verifier,
// and anything else (a part missing or empty, extra parts) is no sign-in.
func TestLoginState(t *testing.T) {
	t.Parallel()
	l := loginState{state: randomToken(), nonce: randomToken(), verifier: randomToken()}
	if got, ok := parseLoginState(l.String()); !ok || got != l {
		t.Fatalf("round trip: %+v %v", got, ok)
	}
	if l.state == l.nonce || l.nonce == l.verifier || len(l.state) != 43 {
		t.Fatalf("tokens not random 256-bit values: %+v", l)
	}
	for _, bad := range []string{"", "a.b", "a..c", ".b.c", "a.b.", "a.b.c.d"} {
		if _, ok := parseLoginState(bad); ok {
			t.Errorf("parseLoginState(%q) accepted", bad)
		}
	}
	if !equalSecret("x", "x") || equalSecret("x", "y") || equalSecret("", "x") {
		t.Error("equalSecret")
	}
}

// TestSecureCookies: cookies are Secure except for http on loopback.
func TestSecureCookies(t *testing.T) {
	t.Parallel()
	for u, want := range map[string]bool{
		"https://notifyd.example.com/admin/sso/callback": true,
		"http://notifyd.example.com/admin/sso/callback":  true,
		"https://127.0.0.1:8080/admin/sso/callback":      true,
		"http://127.0.0.1:8080/admin/sso/callback":       false,
		"http://localhost:8080/admin/sso/callback":       false,
		"http://[::1]:8080/admin/sso/callback":           false,
	} {
		if got := (&sso{cfg: &config.OIDC{RedirectURL: u}}).secureCookies(); got != want {
			t.Errorf("%s: Secure %v, want %v", u, got, want)
		}
	}
}

// TestClaimValues: a roles claim is a string or a list of strings.
func TestClaimValues(t *testing.T) {
	t.Parallel()
	if got := claimValues("eng"); !slices.Equal(got, []string{"eng"}) {
		t.Errorf("string: %v", got)
	}
	if got := claimValues([]any{"eng", 3, "ops"}); !slices.Equal(got, []string{"eng", "ops"}) {
		t.Errorf("list: %v", got)
	}
	if got := claimValues(map[string]any{"a": "b"}); got != nil {
		t.Errorf("object: %v", got)
	}
}
