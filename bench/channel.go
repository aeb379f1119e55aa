package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/channels/email"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// The channel baselines are the email channel alone: the same Sender the
// daemon opens (channels/builtin, the bench config), the same in-process sink
// with WithDiscard, the same concurrency, and the same messages, with no
// database and no queue. What the daemon adds on top of them is notifyd's
// queue and ledger.

// openEmailChannel opens the channels of the bench config with the email
// channel pointed at sink, as server.New does, and returns the email
// channel's Sender (as per-recipient and as digest channel) and the closer.
func openEmailChannel(sink *smtpcapture.Server, logger *slog.Logger) (*config.Config, channels.Channel, channels.DigestChannel, func(), error) {
	cfg, err := loadConfig(configOptions{DatabaseURL: "postgres://unused", SMTPPort: sink.Port()})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	reg, err := builtin.Registry()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	set, err := reg.Open(cfg, logger, nil)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("open channels: %w", err)
	}
	ch, ok := set.Channels[email.Name]
	dg, dok := set.Digests[email.Name]
	if !ok || !dok {
		set.Close()
		return nil, nil, nil, nil, fmt.Errorf("the bench config opened no %s channel", email.Name)
	}
	return cfg, ch, dg, func() { set.Close() }, nil
}

// emailMessage is the message the send job hands the channel for the i-th
// bench recipient (1-based) of an email notification: what jobs.SendWorker
// builds from a claimed delivery (params decoded from the notification's
// JSON, the recipient's profile as insertRecipients wrote it).
func emailMessage(notificationID string, i int, params map[string]any) channels.Message {
	return channels.Message{DeliveryID: uuidv7.String(), NotificationID: notificationID, Notifier: notifierEmail,
		Key: "channel-limit", Reason: "direct", Params: params, CreatedAt: time.Now(), Attempt: 1, Category: "bench",
		Recipient: &channels.Recipient{ID: recipientID(i), Email: fmt.Sprintf("user%d@bench.test", i),
			Name: fmt.Sprintf("User %d", i), Locale: "en", Timezone: "UTC", Data: map[string]any{}}}
}

// decodedParams is benchParams as a send job sees them: decoded from the
// notification's JSON.
func decodedParams() map[string]any {
	var p map[string]any
	_ = json.Unmarshal([]byte(benchJSON), &p)
	return p
}

// lanes runs work(i) for i in [0, n) on k goroutines taking the next i in
// turn, and returns the first error.
func lanes(n, k int, work func(i int) error) error {
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range k {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := work(i); err != nil {
					once.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// measureEmailChannel is the immediate email row's baseline: the email
// channel alone sends the n messages of the email scenario (one per bench
// recipient, rendered from the same templates and params) to the same kind
// of sink, over as many lanes as the daemon sends to one target at once
// (queues.send_per_host), after a warm-up of as many messages that opens the
// pooled connections, as the daemon's warm-up does.
func measureEmailChannel(ctx context.Context, h *harness, n int) (measurement, error) {
	c, err := openSMTPChannel(h)
	if err != nil {
		return measurement{}, err
	}
	defer c.close()
	c.label = "email channel"
	return measureChannel(ctx, h, c, "email.channel", n)
}

// digestMessage is the digest the digest job sends the i-th bench recipient
// (1-based) of the digest scenario: perRecipient items with the inbox texts
// of the setup (bench title, body and URL), the notifications' params, oldest
// first, as jobs.DigestWorker builds it from a claim.
func digestMessage(i, perRecipient int, params map[string]any, created time.Time) channels.Digest {
	items := make([]channels.DigestItem, perRecipient)
	for k := range items {
		p := make(map[string]any, len(params))
		for key, v := range params {
			p[key] = v
		}
		items[k] = channels.DigestItem{Notifier: notifierDigest, Key: fmt.Sprintf("digest-%d", k+1), Category: "bench",
			Reason: "direct", Title: benchTitle, Body: benchBody, URL: benchURL, Params: p, CreatedAt: created}
	}
	return channels.Digest{ID: uuidv7.String(), Recipient: channels.Recipient{ID: recipientID(i),
		Email: fmt.Sprintf("user%d@bench.test", i), Name: fmt.Sprintf("User %d", i), Locale: "en", Timezone: "UTC",
		Data: map[string]any{}}, Items: items, Count: perRecipient, Attempt: 1}
}

// measureDigestChannel is the digest row's baseline: the email channel alone
// sends the recipients digests of the digest scenario (perRecipient items
// each, the same texts and params) to the same kind of sink, over as many
// lanes as the daemon runs digest workers (queues.digest), after a warm-up
// of as many digests.
func measureDigestChannel(ctx context.Context, h *harness, recipients, perRecipient int) (measurement, error) {
	sink, err := smtpcapture.New("127.0.0.1:0", smtpcapture.WithDiscard())
	if err != nil {
		return measurement{}, err
	}
	defer sink.Close()
	cfg, _, dg, closeCh, err := openEmailChannel(sink, h.logger)
	if err != nil {
		return measurement{}, err
	}
	defer closeCh()
	k := cfg.Queues.Digest
	params := decodedParams()
	created := time.Now().Add(-48 * time.Hour)
	send := func(i int) error {
		return dg.SendDigest(ctx, digestMessage(i%recipients+1, perRecipient, params, created))
	}
	if err := lanes(recipients, k, send); err != nil {
		return measurement{}, fmt.Errorf("digest channel warm-up: %w", err)
	}
	sink.Reset()
	h.waitQuiet(ctx)
	stopProf := h.prof.start(ctx, "digest.channel", "", recipients, "digest email")
	cpu0 := h.cpu()
	start := time.Now()
	err = lanes(recipients, k, send)
	elapsed := time.Since(start)
	cpu := h.cpu().sub(cpu0)
	stopProf()
	if err != nil {
		return measurement{}, fmt.Errorf("digest channel: %w", err)
	}
	if got := sink.Count(); got != recipients {
		return measurement{}, fmt.Errorf("digest channel: the sink accepted %d of %d digests", got, recipients)
	}
	return measurement{rate: float64(recipients) / elapsed.Seconds(), seconds: elapsed.Seconds(), cpu: cpu,
		note: fmt.Sprintf("%d digests of %d items, %d lanes, %.2fs, %d SMTP connections, %s", recipients, perRecipient,
			k, elapsed.Seconds(), sink.Connections(), cpu)}, nil
}
