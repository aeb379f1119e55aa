package web_test

import (
	"fmt"
	"testing"

	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// TestBrowserQuietHours drives the preference center's quiet hours form in
// headless Chromium against a real daemon: the stored window is shown, a
// new one is saved with PUT /v1/quiet-hours, a refused one shows the API's
// error, and unchecking clears them.
func TestBrowserQuietHours(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	ctx := browserContext(t)
	_, dbURL := pgtest.NewDBURL(t)
	mailbox := smtpcapture.Start(t)
	cfg := servertest.Config(t, fmt.Sprintf(browserConfig, mailbox.Port()))
	cfg.Database.URL = dbURL
	d := startDemoDaemon(t, ctx, cfg, nil)
	api, token := d.api, d.token
	if code := api.do("PUT", "/v1/recipients/u2", servertest.AdminToken, map[string]any{
		"timezone": "Europe/Paris", "quiet_hours": map[string]any{"start": "22:00", "end": "07:00"}}, nil); code != 200 {
		t.Fatalf("PUT /v1/recipients/u2 = %d", code)
	}

	b := startBrowser(t, bin)
	p := b.newPage(ctx)
	p.navigate(ctx, api.base+"/dev/demo")
	state := prefs(`({hidden: $(".quiet").hidden, on: $(".quiet-on").checked, start: $(".quiet-start").value,
		end: $(".quiet-end").value, zone: $(".quiet-zone").textContent, status: $(".quiet-status").textContent,
		save: $(".quiet-save").disabled, error: $(".error").textContent})`)
	p.waitFor(ctx, "the stored quiet hours", prefs(`!$(".quiet").hidden && $(".quiet-on").checked &&
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
	p.waitFor(ctx, "save enabled", prefs(`!$(".quiet-save").disabled`), state)
	p.click(ctx, prefs(`$(".quiet-save")`))
	p.waitFor(ctx, "saved", prefs(`$(".quiet-status").textContent === "Saved." && $(".quiet-save").disabled`), state)
	api.do("GET", "/v1/quiet-hours", token, nil, &stored)
	if stored.QuietHours == nil || stored.QuietHours.Start != "23:15" || stored.QuietHours.End != "07:00" {
		t.Fatalf("stored %+v, want 23:15-07:00", stored.QuietHours)
	}
	// A window that ends when it starts is refused by the API, and shown.
	setTime(".quiet-end", "23:15")
	p.click(ctx, prefs(`$(".quiet-save")`))
	p.waitFor(ctx, "the API's error", prefs(`!$(".error").hidden && $(".error").textContent.includes("quiet_hours")`), state)
	// Unchecking clears them.
	p.eval(ctx, prefs(`(() => { const c = $(".quiet-on"); c.checked = false; c.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`), nil)
	p.click(ctx, prefs(`$(".quiet-save")`))
	p.waitFor(ctx, "cleared", prefs(`$(".quiet-status").textContent === "Saved." && !$(".quiet-on").checked && $(".quiet-start").disabled`), state)
	stored.QuietHours = nil
	api.do("GET", "/v1/quiet-hours", token, nil, &stored)
	if stored.QuietHours != nil {
		t.Fatalf("stored %+v after clearing, want null", stored.QuietHours)
	}
}
