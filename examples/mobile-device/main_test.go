package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/mobilepushtest"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/server/servertest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestRegisterADevice runs the daemon with local stand-ins of FCM and APNs,
// registers a phone of each platform with the example's client, as the
// apps would, and sends a notification that reaches both.
func TestRegisterADevice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fcm := mobilepushtest.NewFCM("example-app")
	defer fcm.Close()
	apns := mobilepushtest.NewAPNs("TEAM123456", "KEY0000001")
	defer apns.Close()
	dir := t.TempDir()
	keyFile, p8 := filepath.Join(dir, "service-account.json"), filepath.Join(dir, "AuthKey.p8")
	if err := os.WriteFile(keyFile, fcm.ServiceAccountJSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p8, apns.KeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	fcmCA, err := mobilepushtest.WriteCA(fcm.Server, dir)
	if err != nil {
		t.Fatal(err)
	}
	apnsCA, err := mobilepushtest.WriteCA(apns.Server, dir)
	if err != nil {
		t.Fatal(err)
	}
	_, dbURL := pgtest.NewDBURL(t)
	cfg, err := config.Parse("config.yaml", []byte(fmt.Sprintf(`
database: {url: %q}
http: {admin_token: %s, token_secret: %s}
notifiers:
  order.shipped:
    channels:
      fcm: {title: "Order {{.order}} shipped", body: "It is on its way"}
      apns: {title: "Order {{.order}} shipped", body: "It is on its way"}
channels:
  fcm: {service_account_file: %s, base_url: %s, ca_file: %s}
  apns: {key_id: KEY0000001, team_id: TEAM123456, private_key_file: %s, base_url: %s, ca_file: %s}
`, dbURL, servertest.AdminToken, servertest.TokenSecret, keyFile, fcm.URL, fcmCA, p8, apns.URL, apnsCA)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(ctx, server.Options{Config: cfg, Listener: ln, Logger: servertest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		srv.Close()
	}()

	// The app's backend mints the user's recipient token; the app sends
	// its push token with it.
	tok, err := notifyd.RecipientToken(servertest.TokenSecret, "grace", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{Base: "http://" + srv.Addr(), Token: tok}
	iphone, pixel := apns.Register("com.example.app"), fcm.Register()
	servertest.Eventually(t, 10*time.Second, "the API answers", func() bool {
		_, err := c.List(ctx)
		return err == nil
	})
	if err := run(ctx, c, Device{Platform: "ios", Token: iphone, App: "com.example.app"}, ""); err != nil {
		t.Fatal(err)
	}
	id, created, err := c.Register(ctx, Device{Platform: "android", Token: pixel, App: "com.example.app"})
	if err != nil || !created {
		t.Fatalf("Register android = %s, %v, %v", id, created, err)
	}
	// Registering again at the next app start is the same device.
	again, created, err := c.Register(ctx, Device{Platform: "android", Token: pixel, App: "com.example.app"})
	if err != nil || created || again != id {
		t.Fatalf("Register again = %s (want %s), created %v, %v", again, id, created, err)
	}
	// A token that is not the platform's is refused, naming the field.
	_, _, err = c.Register(ctx, Device{Platform: "ios", Token: pixel, App: "com.example.app"})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 422 || apiErr.Code != "invalid_request" || apiErr.Field != "token" {
		t.Fatalf("an FCM token as an iOS one: %v", err)
	}

	if _, err := srv.Client().Send(ctx, notifyd.Notification{Notifier: "order.shipped", Key: "order-7",
		Recipients: []notifyd.Recipient{{ID: "grace"}}, Params: map[string]any{"order": "7"}}); err != nil {
		t.Fatal(err)
	}
	servertest.Eventually(t, 20*time.Second, "a push on each phone", func() bool {
		return apns.Count() == 1 && fcm.Count() == 1
	})
	if m := apns.Messages()[0]; m.Token != iphone || m.Title() != "Order 7 shipped" {
		t.Errorf("APNs got %+v", m)
	}
	if m := fcm.Messages()[0]; m.Token != pixel || m.Title != "Order 7 shipped" {
		t.Errorf("FCM got %+v", m)
	}

	// Sign-out: the app deletes its device.
	if err := run(ctx, c, Device{}, id); err != nil {
		t.Fatal(err)
	}
	devices, err := c.List(ctx)
	if err != nil || len(devices) != 1 || devices[0].Platform != "ios" {
		t.Fatalf("after the delete: %+v, %v", devices, err)
	}
	if err := c.Delete(ctx, id); !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Fatalf("deleting twice: %v", err)
	}
}
