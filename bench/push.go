package main

import (
	"context"
	"fmt"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/channels/webpush"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/pushtest"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/stores/uuidv7"
)

// pushTarget is the web push row's target: deliveries/s at least this
// fraction of immediate email's.
const pushTarget = 0.5

// runPush is the web push scenario: n web push deliveries (one subscription
// per recipient) to a local push service that checks every VAPID token and
// decrypts every payload, as deliveries/s, against immediate email measured
// in the same run (scenario 2's measurement, or one of n emails made now).
func runPush(ctx context.Context, h *harness, n int, immediate *measurement) []Result {
	return vsImmediate(ctx, h, "web push vs immediate email", "web push", pushTarget, n, immediate,
		func() (measurement, error) { return measurePush(ctx, h, n) })
}

// pushConfig is the bench config with a web push notifier and channel.
func pushConfig(dbURL, pub, priv string) (*config.Config, error) {
	src := configYAML(configOptions{DatabaseURL: dbURL}) + benchNotifier("bench.push", `      web_push:
        title: "{{.actor}} commented on {{.item}}"
        body: "A new comment"
        url: "https://app.test/items/{{.item}}"
`) + `channels:
  web_push:
    vapid_public_key: ` + pub + `
    vapid_private_key: ` + priv + `
    subject: "mailto:bench@notifyd.test"
    allow_private: true
`
	cfg, err := config.Parse("bench.yaml", []byte(src))
	if err != nil {
		return nil, fmt.Errorf("bench config: %w", err)
	}
	return cfg, nil
}

// measurePush times n web push deliveries through the real daemon: from the
// COMMIT of SendTx to every delivery row `sent` (fan-out, send jobs reading
// each recipient's subscriptions, RFC 8291 encryption, VAPID, the POST, the
// subscription's success recorded, settles).
func measurePush(ctx context.Context, h *harness, n int) (measurement, error) {
	pub, priv, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		return measurement{}, err
	}
	sink := pushtest.New(pub, pushtest.WithDiscard())
	defer sink.Close()
	db, pool, closeDB, err := h.openDB(ctx, "push", 4)
	if err != nil {
		return measurement{}, err
	}
	defer closeDB()
	if err := insertRecipients(ctx, pool, n); err != nil {
		return measurement{}, err
	}
	// One browser subscription per recipient, each with keys of its own.
	ids := uuidv7.Strings(n)
	endpoints, p256dh, auth := make([]string, n), make([]string, n), make([]string, n)
	for i := range n {
		s := sink.Subscribe()
		endpoints[i], p256dh[i], auth[i] = s.Endpoint, s.Keys.P256dh, s.Keys.Auth
	}
	if _, err := pool.Exec(ctx, `
INSERT INTO notify_push_subscriptions (id, recipient, endpoint, p256dh, auth)
SELECT s.id::uuid, `+recipientSQL+`, s.endpoint, s.p256dh, s.auth
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS s(id, endpoint, p256dh, auth, g)`,
		ids, endpoints, p256dh, auth); err != nil {
		return measurement{}, fmt.Errorf("insert %d push subscriptions: %w", n, err)
	}
	if err := analyze(ctx, pool); err != nil {
		return measurement{}, err
	}
	cfg, err := pushConfig(db.URL, pub, priv)
	if err != nil {
		return measurement{}, err
	}
	d, err := startDaemon(ctx, cfg, server.Options{NoHTTP: true}, h.logger)
	if err != nil {
		return measurement{}, err
	}
	defer d.stop()
	client, _ := notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg})
	// The warm-up of the email row it is measured against
	// (emailScenario.warmUp): one round of the same pushes.
	if err := warmUp(ctx, pool, n, func() error {
		_, _, err := sendCommitted(ctx, pool, client, notifyd.Notification{Notifier: "bench.push", Key: "push-0",
			Recipients: inlineRecipients(n), Params: benchParams}, nil)
		return err
	}, func() int { return sink.Count() + len(sink.Failures()) }); err != nil {
		return measurement{}, fmt.Errorf("push %w", err)
	}
	base := sink.Count()
	nf := notifyd.Notification{Notifier: "bench.push", Key: "push-1", Recipients: inlineRecipients(n), Params: benchParams}
	h.waitQuiet(ctx)
	run, err := timeSend(ctx, h, pool, client, db.Name, "push", nf, n,
		func() int { return sink.Count() + len(sink.Failures()) }, nil)
	if err == nil && sink.Count()-base != n {
		err = fmt.Errorf("%d of %d decrypted", sink.Count()-base, n)
	}
	if err != nil {
		return measurement{}, fmt.Errorf("web push: %w (refused: %v)", err, firstN(sink.Failures(), 3))
	}
	committed, done, cpu := run.committed, run.done, run.cpu
	elapsed := done.Sub(committed)
	return measurement{rate: float64(n) / elapsed.Seconds(), seconds: elapsed.Seconds(), cpu: cpu,
		note: fmt.Sprintf("%d pushes decrypted and VAPID-checked by the local push service, %.2fs, %s", n, elapsed.Seconds(), cpu)}, nil
}

func firstN(s []string, n int) []string { return s[:min(n, len(s))] }
