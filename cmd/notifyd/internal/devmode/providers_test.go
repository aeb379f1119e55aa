package devmode_test

import (
	"testing"

	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/cmd/notifyd/internal/devmode"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/smtpcapture"
)

// TestConfigureCapturesEmailProviders: with channels.email.providers set,
// dev mode still sends every email to its mailbox (the providers are
// dropped, not combined with the mailbox's smtp, which would not open).
func TestConfigureCapturesEmailProviders(t *testing.T) {
	t.Parallel()
	c, err := config.Parse("t.yaml", []byte(`
channels:
  email:
    from: "A <a@acme.test>"
    providers:
      - {kind: sendgrid, api_key: k}
`))
	if err != nil {
		t.Fatal(err)
	}
	mb := smtpcapture.Start(t)
	if err := devmode.Configure(c, mb); err != nil {
		t.Fatal(err)
	}
	set, err := builtin.MustRegistry().Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	set.Close()
}
