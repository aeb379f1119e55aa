package devmode

import (
	"testing"

	"github.com/notifyd/notifyd/config"
)

// ConfiguredRelay names the server email goes to, or every server of an
// smtp list in the order they are tried.
func TestConfiguredRelay(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ yaml, want string }{
		{"channels:\n  email:\n    from: a@example.com\n    smtp: {host: mail.example.com, port: 587}\n",
			"channels.email's server, mail.example.com:587"},
		{"channels:\n  email:\n    from: a@example.com\n    smtp:\n      - {host: one.example.com, port: 25}\n      - {host: two.example.com, port: 2525}\n",
			"channels.email's servers, tried in order, one.example.com:25, two.example.com:2525"},
	} {
		cfg, err := config.Parse("dev.yaml", []byte(c.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if got := ConfiguredRelay(cfg); got != c.want {
			t.Errorf("ConfiguredRelay = %q, want %q", got, c.want)
		}
	}
}
