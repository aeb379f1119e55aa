package web_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/web"
)

// demoDaemon is a daemon the browser tests drive, mounted the way `notifyd
// dev` mounts it: the components under /ui/ (the daemon serves them), the
// demo page at /dev/demo for recipient u2, and routes.
type demoDaemon struct {
	*server.Server
	api   apiClient
	token string // u2's recipient token, the demo page's
}

// startDemoDaemon starts the daemon on cfg (its database set) on
// 127.0.0.1:0; it stops when the test ends, after cleanups registered later
// (a browser's) have run.
func startDemoDaemon(t *testing.T, ctx context.Context, cfg *config.Config, routes map[string]http.Handler) *demoDaemon {
	t.Helper()
	token, err := notifyd.RecipientToken(cfg.HTTP.TokenSecret, "u2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]http.Handler{
		"GET /dev/demo": web.Demo(web.DemoOptions{Token: func() string { return token }, Recipient: "u2"}),
	}
	for pattern, h := range routes {
		all[pattern] = h
	}
	d, err := server.New(ctx, server.Options{Config: cfg, Listener: ln, Logger: servertest.Logger(),
		DrainTimeout: 5 * time.Second, Routes: all})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
		d.Close()
	})
	return &demoDaemon{Server: d, api: apiClient{t: t, base: "http://" + d.Addr()}, token: token}
}
