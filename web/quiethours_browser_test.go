package web_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/testing/notifydtest"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/internal/testing/smtptest"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/web"
)

// TestBrowserQuietHours drives the preference center's quiet hours form in
// headless Chromium against a real daemon: the stored window is shown, a
// new one is saved with PUT /v1/quiet-hours, a refused one shows the API's
// error, and unchecking clears them.
func TestBrowserQuietHours(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, dbURL := pgtest.NewDBURL(t)
	mailbox := smtptest.Start(t)
	cfg := notifydtest.Config(t, fmt.Sprintf(browserConfig, mailbox.Port()))
	cfg.Database.URL = dbURL
	token, err := notifyd.RecipientToken(cfg.HTTP.TokenSecret, "u2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err := server.New(ctx, server.Options{Config: cfg, Listener: ln, Logger: notifydtest.Logger(),
		DrainTimeout: 5 * time.Second,
		Routes: map[string]http.Handler{
			"GET /dev/demo": web.Demo(web.DemoOptions{Token: func() string { return token }, Recipient: "u2"}),
		}})
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
	api := apiClient{t: t, base: "http://" + d.Addr()}
	if code := api.do("PUT", "/v1/recipients/u2", notifydtest.AdminToken, map[string]any{
		"timezone": "Europe/Paris", "quiet_hours": map[string]any{"start": "22:00", "end": "07:00"}}, nil); code != 200 {
		t.Fatalf("PUT /v1/recipients/u2 = %d", code)
	}

	b := startBrowser(t, bin)
	p := b.newPage(ctx)
	p.navigate(ctx, api.base+"/dev/demo")
	const wait = 15 * time.Second
	state := prefs(`({hidden: $(".quiet").hidden, on: $(".quiet-on").checked, start: $(".quiet-start").value,
		end: $(".quiet-end").value, zone: $(".quiet-zone").textContent, status: $(".quiet-status").textContent,
		save: $(".quiet-save").disabled, error: $(".error").textContent})`)
	p.waitFor(ctx, wait, "the stored quiet hours", prefs(`!$(".quiet").hidden && $(".quiet-on").checked &&
		$(".quiet-start").value === "22:00" && $(".quiet-end").value === "07:00" && $(".quiet-zone").textContent === "(Europe/Paris)" &&
		$(".quiet-save").disabled`), state)

	setTime := func(sel, v string) {
		p.eval(ctx, prefs(`(() => { const i = $(`+jsString(sel)+`); i.value = `+jsString(v)+`;
			i.dispatchEvent(new Event("input", {bubbles: true})); return true; })()`), nil)
	}
	var stored struct {
		QuietHours *struct{ Start, End string } `json:"quiet_hours"`
	}
	// A new window is saved.
	setTime(".quiet-start", "23:15")
	p.waitFor(ctx, wait, "save enabled", prefs(`!$(".quiet-save").disabled`), state)
	p.click(ctx, prefs(`$(".quiet-save")`))
	p.waitFor(ctx, wait, "saved", prefs(`$(".quiet-status").textContent === "Saved." && $(".quiet-save").disabled`), state)
	api.do("GET", "/v1/quiet-hours", token, nil, &stored)
	if stored.QuietHours == nil || stored.QuietHours.Start != "23:15" || stored.QuietHours.End != "07:00" {
		t.Fatalf("stored %+v, want 23:15-07:00", stored.QuietHours)
	}
	// A window that ends when it starts is refused by the API, and shown.
	setTime(".quiet-end", "23:15")
	p.click(ctx, prefs(`$(".quiet-save")`))
	p.waitFor(ctx, wait, "the API's error", prefs(`!$(".error").hidden && $(".error").textContent.includes("quiet_hours")`), state)
	// Unchecking clears them.
	p.eval(ctx, prefs(`(() => { const c = $(".quiet-on"); c.checked = false; c.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`), nil)
	p.click(ctx, prefs(`$(".quiet-save")`))
	p.waitFor(ctx, wait, "cleared", prefs(`$(".quiet-status").textContent === "Saved." && !$(".quiet-on").checked && $(".quiet-start").disabled`), state)
	stored.QuietHours = nil
	api.do("GET", "/v1/quiet-hours", token, nil, &stored)
	if stored.QuietHours != nil {
		t.Fatalf("stored %+v after clearing, want null", stored.QuietHours)
	}
}
