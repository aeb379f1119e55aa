package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/channels/email"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// providersSESTarget: email through the ses provider at least this fraction
// of email through smtp, the same channel, messages and lanes.
const providersSESTarget = 0.8

// runProviders is the email provider row: the email channel alone sends n
// messages through the ses provider to a local SES endpoint, against the
// same n through smtp to the in-process sink, at the same lanes
// (queues.send_per_host) and with the same sending goroutines. Each is
// measured twice, alternating, and the faster run of each counts, so that a
// burst of other load falls on one run rather than on the ratio.
func runProviders(ctx context.Context, h *harness, n int) []Result {
	const row = "email via ses provider vs via smtp"
	const unit = "messages/s"
	var best [2]measurement
	for round := range 2 {
		for i, open := range []func(*harness) (*channelUnderTest, error){openSMTPChannel, openSESChannel} {
			c, err := open(h)
			if err != nil {
				return []Result{errorResult(row, unit, ">=", providersSESTarget, "ratio", err)}
			}
			m, err := measureChannel(ctx, h, c, "providers."+c.label, n)
			c.close()
			if err != nil {
				return []Result{errorResult(row, unit, ">=", providersSESTarget, "ratio", err)}
			}
			fmt.Printf("  round %d, %s: %s messages/s (%s)\n", round+1, c.label, formatNumber(m.rate), m.note)
			if m.rate > best[i].rate {
				best[i] = m
			}
		}
	}
	r := ratioResult(row, unit, best[1].rate, best[0].rate, "via smtp to the in-process sink", unit, ">=", providersSESTarget)
	return []Result{annotate(r, n, best[1], &best[0])}
}

// channelUnderTest is an email channel opened on the bench config with one
// provider, and the sink its messages go to.
type channelUnderTest struct {
	label    string
	ch       channels.Channel
	lanes    int
	accepted func() int
	reset    func()
	close    func()
	detail   func() string // what the note adds, such as the SMTP connections
}

// openSMTPChannel opens the email channel of the bench config on the
// in-process SMTP sink.
func openSMTPChannel(h *harness) (*channelUnderTest, error) {
	sink, err := smtpcapture.New("127.0.0.1:0", smtpcapture.WithDiscard())
	if err != nil {
		return nil, err
	}
	cfg, ch, _, closeCh, err := openEmailChannel(sink, h.logger)
	if err != nil {
		sink.Close()
		return nil, err
	}
	return &channelUnderTest{label: "smtp", ch: ch, lanes: cfg.Queues.SendPerHost, accepted: sink.Count,
		reset: sink.Reset, close: func() { closeCh(); sink.Close() },
		detail: func() string { return fmt.Sprintf("%d SMTP connections", sink.Connections()) }}, nil
}

// openSESChannel opens the email channel of the bench config with one ses
// provider, at the same lanes, on a local SES endpoint.
func openSESChannel(h *harness) (*channelUnderTest, error) {
	ses, err := startSESEndpoint()
	if err != nil {
		return nil, err
	}
	cfg, err := loadConfig(configOptions{DatabaseURL: "postgres://unused", SMTPPort: 1})
	if err != nil {
		ses.close()
		return nil, err
	}
	sec, err := cfg.Channels[email.Name].With("", map[string]any{"smtp": nil, "providers": []map[string]any{{
		"kind": "ses", "region": "us-east-1", "access_key_id": "AKIDBENCH", "secret_access_key": "bench-secret",
		"endpoint": ses.url, "lanes": cfg.Queues.SendPerHost}}})
	if err != nil {
		ses.close()
		return nil, err
	}
	cfg.Channels[email.Name] = sec
	reg, err := builtin.Registry()
	if err != nil {
		ses.close()
		return nil, err
	}
	set, err := reg.Open(cfg, h.logger, nil)
	if err != nil {
		ses.close()
		return nil, fmt.Errorf("open channels: %w", err)
	}
	return &channelUnderTest{label: "ses", ch: set.Channels[email.Name], lanes: cfg.Queues.SendPerHost,
		accepted: func() int { return int(ses.count.Load()) }, reset: func() { ses.count.Store(0) },
		close: func() { set.Close(); ses.close() }, detail: func() string { return fmt.Sprintf("%d HTTP connections", ses.conns.Load()) }}, nil
}

// measureChannel sends n messages through c (one per bench recipient,
// rendered from the same templates and params) on c.lanes goroutines, as
// many as the daemon sends to one target at once, after a warm-up of as
// many messages that opens the connections, and times the second n. prof
// names the window for -profile.
func measureChannel(ctx context.Context, h *harness, c *channelUnderTest, prof string, n int) (measurement, error) {
	params := decodedParams()
	nid := uuidv7.String()
	send := func(i int) error {
		msg := emailMessage(nid, i%n+1, params)
		if err := c.ch.Addressable(msg.Notifier, *msg.Recipient); err != nil {
			return err
		}
		return c.ch.Send(ctx, msg)
	}
	if err := lanes(n, c.lanes, send); err != nil {
		return measurement{}, fmt.Errorf("%s warm-up: %w", c.label, err)
	}
	c.reset()
	h.waitQuiet(ctx)
	stopProf := h.prof.start(ctx, prof, "", n, "message")
	cpu0 := h.cpu()
	start := time.Now()
	err := lanes(n, c.lanes, send)
	elapsed := time.Since(start)
	cpu := h.cpu().sub(cpu0)
	stopProf()
	if err != nil {
		return measurement{}, fmt.Errorf("%s: %w", c.label, err)
	}
	if got := c.accepted(); got != n {
		return measurement{}, fmt.Errorf("%s: the sink accepted %d of %d messages", c.label, got, n)
	}
	return measurement{rate: float64(n) / elapsed.Seconds(), seconds: elapsed.Seconds(), cpu: cpu,
		note: fmt.Sprintf("%s: %d messages, %d lanes, %.2fs, %s, %s", c.label, n, c.lanes, elapsed.Seconds(),
			c.detail(), cpu)}, nil
}

// sesEndpoint is a local SES v2 SendEmail endpoint, the ses provider's
// counterpart of the SMTP sink: it takes POST /v2/email/outbound-emails
// with a SigV4 Authorization header and a JSON body with the raw message,
// and answers 200 with a MessageId, as SES does.
type sesEndpoint struct {
	url   string
	srv   *http.Server
	count atomic.Int64
	conns atomic.Int64 // connections accepted
}

func startSESEndpoint() (*sesEndpoint, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &sesEndpoint{url: "http://" + ln.Addr().String()}
	e.srv = &http.Server{Handler: http.HandlerFunc(e.serve), ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				e.conns.Add(1)
			}
		}}
	go func() { _ = e.srv.Serve(ln) }()
	return e, nil
}

func (e *sesEndpoint) serve(w http.ResponseWriter, r *http.Request) {
	// As the SMTP sink reads the data without parsing the message, the
	// endpoint checks the body's shape without decoding it: its CPU is the
	// bench's, not the provider's.
	body, err := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path != email.SESPath || !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=") ||
		r.Header.Get("X-Amz-Date") == "" || err != nil || !bytes.HasPrefix(body, []byte(`{"FromEmailAddress":`)) ||
		!bytes.Contains(body, []byte(`"Content":{"Raw":{"Data":"`)) || !bytes.HasSuffix(body, []byte("}")) {
		w.Header().Set("X-Amzn-ErrorType", "BadRequestException")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"message":"bad request"}`)
		return
	}
	n := e.count.Add(1)
	fmt.Fprintf(w, `{"MessageId":"0100018c-bench-%010d-000000"}`, n)
}

func (e *sesEndpoint) close() { _ = e.srv.Close() }
