package email_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/email"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/smtpcapture"
)

// failoverSetup starts two SMTP servers and a Sender that lists them in
// order, with a clock the test moves.
type failoverBundle struct {
	primary, secondary *smtpcapture.Server
	sender             *email.Sender
	now                *atomic.Int64 // seconds after fixedNow
}

func failoverSetup(t *testing.T) failoverBundle {
	t.Helper()
	b := failoverBundle{primary: smtpcapture.Start(t), secondary: smtpcapture.Start(t), now: new(atomic.Int64)}
	cfg := &email.Config{
		From:     "Acme <notify@acme.test>",
		SMTP:     email.SMTP{Host: b.primary.Host(), Port: b.primary.Port(), TLS: "none"},
		Failover: []email.SMTP{{Host: b.secondary.Host(), Port: b.secondary.Port(), TLS: "none"}},
		Timeout:  config.Duration(5 * time.Second),
	}
	clock := func() time.Time { return fixedNow.Add(time.Duration(b.now.Load()) * time.Second) }
	s, err := email.New(cfg, testDigest(), testNotifiers(), email.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	b.sender = s
	return b
}

// send sends one message and returns its error and the provider it reported.
func (b failoverBundle) send(t *testing.T, id string) (string, error) {
	t.Helper()
	ctx, rep := channels.WithReport(context.Background())
	err := b.sender.Send(ctx, msg(id, ann()))
	return rep.Provider, err
}

func TestFailoverPrimaryRefusesConnections(t *testing.T) {
	t.Parallel()
	b := failoverSetup(t)
	b.primary.Down()

	provider, err := b.send(t, "d-1")
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if provider != b.secondary.Addr() {
		t.Errorf("provider = %q, want the secondary %q", provider, b.secondary.Addr())
	}
	if got := b.secondary.Messages(); len(got) != 1 || got[0].HeaderValue("Message-ID") != "<d-1@acme.test>" {
		t.Errorf("secondary got %d messages, want d-1", len(got))
	}
}

func TestFailoverOn421(t *testing.T) {
	t.Parallel()
	b := failoverSetup(t)
	b.primary.FailNext(1, 421, "closing, try later")

	provider, err := b.send(t, "d-1")
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if provider != b.secondary.Addr() {
		t.Errorf("provider = %q, want the secondary %q", provider, b.secondary.Addr())
	}
	if n := b.secondary.Count(); n != 1 {
		t.Errorf("secondary accepted %d messages, want 1", n)
	}
	if n := b.primary.Count(); n != 0 {
		t.Errorf("primary accepted %d messages, want 0", n)
	}

	// The next message goes to the primary again: one failure does not skip it.
	provider, err = b.send(t, "d-2")
	if err != nil {
		t.Fatalf("second send: %v", err)
	}
	if provider != b.primary.Addr() {
		t.Errorf("second provider = %q, want the primary %q", provider, b.primary.Addr())
	}
	if n := b.primary.Count(); n != 1 {
		t.Errorf("primary accepted %d messages, want 1", n)
	}
}

func TestFailover5xxIsFinal(t *testing.T) {
	t.Parallel()
	b := failoverSetup(t)
	b.primary.FailNext(1, 550, "mailbox unavailable")

	provider, err := b.send(t, "d-1")
	if k := kind(t, err); k != channels.KindPermanent {
		t.Fatalf("kind = %v (%v), want permanent", k, err)
	}
	if !strings.Contains(err.Error(), "550") {
		t.Errorf("error %q does not carry the reply", err)
	}
	if provider != b.primary.Addr() {
		t.Errorf("provider = %q, want the primary that refused %q", provider, b.primary.Addr())
	}
	if n := b.secondary.Connections(); n != 0 {
		t.Errorf("secondary saw %d connections, want none", n)
	}
}

func TestFailoverEveryServerFailsIsTemporary(t *testing.T) {
	t.Parallel()
	b := failoverSetup(t)
	b.primary.Down()
	b.secondary.FailNext(1, 451, "greylisted")

	provider, err := b.send(t, "d-1")
	if k := kind(t, err); k != channels.KindTemporary {
		t.Fatalf("kind = %v (%v), want temporary", k, err)
	}
	for _, want := range []string{"every smtp server failed", b.primary.Addr(), b.secondary.Addr(), "451"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if provider != b.secondary.Addr() {
		t.Errorf("provider = %q, want the last server tried %q", provider, b.secondary.Addr())
	}
}

// TestFailoverBreakerSkipsFailingPrimary: after three failures in a row the
// primary is not tried for the cool-down; afterwards it is tried again.
func TestFailoverBreakerSkipsFailingPrimary(t *testing.T) {
	t.Parallel()
	b := failoverSetup(t)
	b.primary.FailNext(100, 421, "overloaded")

	for i := range 3 {
		if _, err := b.send(t, "d-"+string(rune('a'+i))); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	tried := b.primary.Connections() // a 421 closes the connection: one per message
	if tried != 3 {
		t.Fatalf("primary connections = %d, want 3", tried)
	}
	provider, err := b.send(t, "d-skip")
	if err != nil {
		t.Fatal(err)
	}
	if provider != b.secondary.Addr() || b.primary.Connections() != tried {
		t.Errorf("while open: provider %q, primary connections %d; want the secondary and still %d",
			provider, b.primary.Connections(), tried)
	}

	// After the cool-down the primary is tried again; it fails once more and
	// is skipped again at once.
	b.now.Add(31)
	if _, err := b.send(t, "d-probe"); err != nil {
		t.Fatal(err)
	}
	if got := b.primary.Connections(); got != tried+1 {
		t.Errorf("after the cool-down primary connections = %d, want %d", got, tried+1)
	}
	if _, err := b.send(t, "d-skip2"); err != nil {
		t.Fatal(err)
	}
	if got := b.primary.Connections(); got != tried+1 {
		t.Errorf("after a failed probe primary connections = %d, want still %d", got, tried+1)
	}
	if n := b.secondary.Count(); n != 6 {
		t.Errorf("secondary accepted %d messages, want 6", n)
	}
}

// TestFailoverAllOpenTriesAnyway: with every breaker open the servers are
// tried all the same, so a recovered server is found without waiting.
func TestFailoverAllOpenTriesAnyway(t *testing.T) {
	t.Parallel()
	b := failoverSetup(t)
	b.primary.FailNext(3, 421, "overloaded")
	b.secondary.FailNext(3, 421, "overloaded")
	for i := range 3 {
		if _, err := b.send(t, "d-"+string(rune('a'+i))); err == nil {
			t.Fatalf("send %d succeeded, want every server failing", i)
		}
	}
	provider, err := b.send(t, "d-ok")
	if err != nil {
		t.Fatalf("send with every breaker open: %v", err)
	}
	if provider != b.primary.Addr() {
		t.Errorf("provider = %q, want the primary %q", provider, b.primary.Addr())
	}
}

func TestSMTPListConfig(t *testing.T) {
	t.Parallel()
	reg, err := channels.NewRegistry(email.Plugin)
	if err != nil {
		t.Fatal(err)
	}
	good := `channels:
  email:
    from: a@b.test
    smtp:
      - {host: smtp-a.test, port: 25}
      - {host: smtp-b.test, port: 587, tls: starttls}
`
	c, err := config.ParseWith("test.yaml", []byte(good), reg.Check)
	if err != nil {
		t.Fatal(err)
	}
	set, err := reg.Open(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	if _, ok := set.Channels[email.Name]; !ok {
		t.Fatal("email is not configured")
	}

	bad := `channels:
  email:
    from: a@b.test
    smtp:
      - {host: smtp-a.test, port: 25}
      - {host: smtp-b.test, port: 70000}
      - {port: 25, tls: ssl}
      - {host: smtp-a.test, port: 25}
`
	_, err = config.ParseWith("test.yaml", []byte(bad), reg.Check)
	if err == nil {
		t.Fatal("bad list accepted")
	}
	want := []string{
		"test.yaml:6: channels.email.smtp[1].port: must be between 1 and 65535, got 70000",
		"test.yaml:7: channels.email.smtp[2].host: must be set",
		"test.yaml:7: channels.email.smtp[2].tls: unknown tls mode \"ssl\"",
		"test.yaml:8: channels.email.smtp[3]: smtp-a.test:25 is listed twice (also smtp[0])",
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("errors lack %q:\n%v", w, err)
		}
	}

	unknown := "channels:\n  email:\n    from: a@b.test\n    smtp:\n      - {host: a, port: 25}\n      - {host: b, port: 25, bogus: 1}\n"
	if _, err := config.ParseWith("test.yaml", []byte(unknown), reg.Check); err == nil ||
		!strings.Contains(err.Error(), "test.yaml:6: channels.email.smtp[1].bogus: unknown key") {
		t.Errorf("unknown key in an entry: %v", err)
	}

	empty := "channels:\n  email:\n    from: a@b.test\n    smtp: []\n"
	if _, err := config.ParseWith("test.yaml", []byte(empty), reg.Check); err == nil ||
		!strings.Contains(err.Error(), "test.yaml:4: channels.email.smtp: an empty list") {
		t.Errorf("empty list: %v", err)
	}
}
