package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/mobilepushtest"
	"github.com/notifyd/notifyd/server"
)

// mobilePushTarget is the mobile push row's target: deliveries/s at least
// this fraction of immediate email's.
const mobilePushTarget = 0.5

// runMobilePush is the mobile push scenario: n deliveries, half of them to
// Android devices through a local FCM (OAuth token exchange, HTTP v1 send)
// and half to iOS devices through a local APNs (HTTP/2, ES256 provider
// token), as deliveries/s, against immediate email measured in the same run.
func runMobilePush(ctx context.Context, h *harness, n int, immediate *measurement) []Result {
	return vsImmediate(ctx, h, "mobile push (FCM + APNs) vs immediate email", "mobile push", mobilePushTarget, n, immediate,
		func() (measurement, error) { return measureMobilePush(ctx, h, n) })
}

// measureMobilePush times n mobile push deliveries through the real daemon:
// n/2 recipients with an iPhone and an Android phone each, one notification
// with fcm and apns templates; from the COMMIT of SendTx to every delivery
// row `sent` (fan-out with the device check, send jobs reading the batch's
// devices, the pushes, the devices' successes recorded, settles). The
// local services check every OAuth assertion, access token and provider
// token and every message's shape.
func measureMobilePush(ctx context.Context, h *harness, n int) (measurement, error) {
	n -= n % 2
	fcm := mobilepushtest.NewFCM("bench-app", mobilepushtest.WithFCMDiscard())
	defer fcm.Close()
	apns := mobilepushtest.NewAPNs("TEAM123456", "KEY0000001", mobilepushtest.WithAPNsDiscard())
	defer apns.Close()
	dir, err := os.MkdirTemp("", "notifyd-bench-mobilepush-")
	if err != nil {
		return measurement{}, err
	}
	defer os.RemoveAll(dir)
	keyFile, p8 := filepath.Join(dir, "service-account.json"), filepath.Join(dir, "AuthKey.p8")
	if err := os.WriteFile(keyFile, fcm.ServiceAccountJSON(), 0o600); err != nil {
		return measurement{}, err
	}
	if err := os.WriteFile(p8, apns.KeyPEM(), 0o600); err != nil {
		return measurement{}, err
	}
	fcmCA, err := mobilepushtest.WriteCA(fcm.Server, dir)
	if err != nil {
		return measurement{}, err
	}
	apnsCA, err := mobilepushtest.WriteCA(apns.Server, dir)
	if err != nil {
		return measurement{}, err
	}

	db, pool, closeDB, err := h.openDB(ctx, "mobilepush", 4)
	if err != nil {
		return measurement{}, err
	}
	defer closeDB()
	recipients := n / 2
	if err := insertRecipients(ctx, pool, recipients); err != nil {
		return measurement{}, err
	}
	ios, android := make([]string, recipients), make([]string, recipients)
	for i := range recipients {
		ios[i], android[i] = apns.Register("com.bench.app"), fcm.Register()
	}
	if _, err := pool.Exec(ctx, `
INSERT INTO notify_devices (id, recipient, platform, token, app)
SELECT gen_random_uuid(), `+recipientSQL+`, p.platform, p.token, 'com.bench.app'
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS d(ios, android, g),
     LATERAL (VALUES ('ios', d.ios), ('android', d.android)) AS p(platform, token)`, ios, android); err != nil {
		return measurement{}, fmt.Errorf("insert %d devices: %w", n, err)
	}
	if err := analyze(ctx, pool); err != nil {
		return measurement{}, err
	}
	src := configYAML(configOptions{DatabaseURL: db.URL}) + benchNotifier("bench.mobile", `      fcm:
        title: "{{.actor}} commented on {{.item}}"
        body: "A new comment"
        url: "https://app.test/items/{{.item}}"
      apns:
        title: "{{.actor}} commented on {{.item}}"
        body: "A new comment"
        url: "https://app.test/items/{{.item}}"
`) + fmt.Sprintf(`channels:
  fcm: {service_account_file: %s, base_url: %s, ca_file: %s}
  apns: {key_id: KEY0000001, team_id: TEAM123456, private_key_file: %s, base_url: %s, ca_file: %s}
`, keyFile, fcm.URL, fcmCA, p8, apns.URL, apnsCA)
	cfg, err := config.Parse("bench.yaml", []byte(src))
	if err != nil {
		return measurement{}, fmt.Errorf("bench config: %w", err)
	}
	d, err := startDaemon(ctx, cfg, server.Options{NoHTTP: true}, h.logger)
	if err != nil {
		return measurement{}, err
	}
	defer d.stop()
	client, _ := notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg})
	arrived := func() int { return fcm.Count() + apns.Count() + len(fcm.Failures()) + len(apns.Failures()) }
	refused := func() []string { return firstN(append(fcm.Failures(), apns.Failures()...), 3) }
	// The warm-up of the email row it is measured against: one round of the
	// same pushes.
	if err := warmUp(ctx, pool, n, func() error {
		_, _, err := sendCommitted(ctx, pool, client, notifyd.Notification{Notifier: "bench.mobile", Key: "mobile-0",
			Recipients: inlineRecipients(recipients), Params: benchParams}, nil)
		return err
	}, arrived); err != nil {
		return measurement{}, fmt.Errorf("mobile push %w (refused: %v)", err, refused())
	}
	base := fcm.Count() + apns.Count()
	nf := notifyd.Notification{Notifier: "bench.mobile", Key: "mobile-1", Recipients: inlineRecipients(recipients), Params: benchParams}
	h.waitQuiet(ctx)
	run, err := timeSend(ctx, h, pool, client, db.Name, "mobilepush", nf, n, arrived, nil)
	if err == nil && fcm.Count()+apns.Count()-base != n {
		err = fmt.Errorf("%d of %d accepted", fcm.Count()+apns.Count()-base, n)
	}
	if err != nil {
		return measurement{}, fmt.Errorf("mobile push: %w (refused: %v)", err, refused())
	}
	elapsed := run.done.Sub(run.committed)
	return measurement{rate: float64(n) / elapsed.Seconds(), seconds: elapsed.Seconds(), cpu: run.cpu,
		note: fmt.Sprintf("%d pushes (%d FCM, %d APNs over HTTP/2) checked by the local services, %d OAuth exchanges, %.2fs, %s",
			n, n/2, n/2, fcm.Exchanges(), elapsed.Seconds(), run.cpu)}, nil
}
