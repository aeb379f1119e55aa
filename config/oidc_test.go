package config

import (
	"strings"
	"testing"
	"time"
)

// TestConsoleOIDCCheck: a console.oidc that cannot work is refused, each
// problem by key and line: no issuer, no client id, a redirect URL that is
// http off loopback or not the callback path, a role map naming no role or
// with no claim to read.
func TestConsoleOIDCCheck(t *testing.T) {
	t.Parallel()
	src := `console:
  oidc:
    issuer: ""
    redirect_url: http://console.example.com/admin/sso/callback
    role_map:
      eng: superuser
`
	got := parseErrors(t, src, noEnv)
	want := []string{
		`test.yaml:2: console.oidc.client_id: must be set (the client registered with the provider)`,
		`test.yaml:2: console.oidc.roles_claim: must be set when console.oidc.role_map is (the claim whose values it maps, such as groups)`,
		`test.yaml:3: console.oidc.issuer: must be the provider's https issuer URL (http only on a loopback host), got ""`,
		`test.yaml:4: console.oidc.redirect_url: must be https (http only on a loopback host), got "http://console.example.com/admin/sso/callback"`,
		`test.yaml:6: console.oidc.role_map.eng: must be viewer, operator or admin, got "superuser"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	src = `console:
  oidc:
    issuer: https://accounts.example.com
    client_id: notifyd
    client_secret: s
    redirect_url: https://notifyd.example.com/admin/login
`
	got = parseErrors(t, src, noEnv)
	if len(got) != 1 || !strings.Contains(got[0], "test.yaml:6: console.oidc.redirect_url: must end in /admin/sso/callback") {
		t.Errorf("got %q", got)
	}

	ok := `console:
  oidc:
    issuer: http://127.0.0.1:5556
    client_id: notifyd
    client_secret: s
    redirect_url: http://127.0.0.1:8080/admin/sso/callback
    roles_claim: groups
    role_map: {eng: viewer, eng-admins: admin}
`
	c, err := parseWith("test.yaml", []byte(ok), noEnv)
	if err != nil {
		t.Fatalf("a loopback dev config: %v", err)
	}
	if o := c.Console.OIDC; o.SessionTTL.D() != 12*time.Hour || o.IdleTimeout.D() != time.Hour {
		t.Errorf("defaults: session_ttl %s idle_timeout %s", o.SessionTTL, o.IdleTimeout)
	}
}
