package server_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/channels/tracking"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/smtpcapture"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server/servertest"
)

// A tracked email, sent over real SMTP, carries an open pixel and links
// rewritten to signed redirects on the public base URL, and its unsubscribe
// links untouched. Fetching the pixel records an open, following a link
// records a click (once per URL) and lands on that URL only; a scanner's
// fetch is recorded as a machine's; a tampered link redirects nowhere.
func TestTrackedEmailOpensAndClicks(t *testing.T) {
	t.Parallel()
	_, url := pgtest.NewDBURL(t)
	smtp := smtpcapture.Start(t)
	cfg := servertest.Config(t, servertest.BaseConfig+fmt.Sprintf(`
  order.shipped:
    channels:
      email:
        subject: "Order {{.order}} shipped"
        html: '<html><body><p><a href="https://shop.test/orders/{{.order}}?a=1&b=2">Track it</a> <a href="https://shop.test/help">Help</a> <a href="https://shop.test/unsubscribe">Stop these</a> <a href="mailto:help@shop.test">Write</a></p></body></html>'
        track: {opens: true, clicks: true}
channels:
  email:
    from: "Shop <shop@shop.test>"
    smtp: [{host: 127.0.0.1, port: %d}]
    unsubscribe_url: "http://127.0.0.1:1"
`, smtp.Port()))
	cfg.Database.URL = url
	base := runDaemon(t, cfg)
	call := apiCaller(t, base)

	if code, _ := call("PUT", "/v1/recipients/u1", servertest.AdminToken, map[string]any{"email": "u1@example.test"}); code != 200 {
		t.Fatalf("PUT recipient = %d", code)
	}
	code, res := call("POST", "/v1/notifications", servertest.AdminToken, map[string]any{
		"notifier": "order.shipped", "key": "o-1", "recipients": []any{"u1"}, "params": map[string]any{"order": "42"}})
	if code != 202 {
		t.Fatalf("POST notification = %d %v", code, res)
	}
	servertest.Eventually(t, 20*time.Second, "the email captured", func() bool { return len(smtp.Messages()) == 1 })
	html := smtp.Messages()[0].HTML

	pub := regexp.MustCompile(`http://127\.0\.0\.1:1(/t/[oc]/[A-Za-z0-9_.-]+)`)
	links := pub.FindAllStringSubmatch(html, -1)
	if len(links) != 3 { // the pixel and two links
		t.Fatalf("tracking links in %s: %v", html, links)
	}
	for _, keep := range []string{`href="https://shop.test/unsubscribe"`, `href="mailto:help@shop.test"`} {
		if !strings.Contains(html, keep) {
			t.Errorf("%s was rewritten: %s", keep, html)
		}
	}
	var open, order, help string
	for _, l := range links {
		switch {
		case strings.HasPrefix(l[1], "/t/o/"):
			open = l[1]
		case order == "":
			order = l[1]
		default:
			help = l[1]
		}
	}
	if open == "" || !strings.Contains(html, `<img src="http://127.0.0.1:1`+open) {
		t.Fatalf("no open pixel: %s", html)
	}

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(method, path, ua string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		req.Header.Set("User-Agent", ua)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	person := "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko)"
	scanner := "Mozilla/5.0 (compatible; BingPreview/1.0b)"

	if r := get("GET", order, scanner); r.StatusCode != 302 || r.Header.Get("Location") != "https://shop.test/orders/42?a=1&b=2" {
		t.Fatalf("scanner click = %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	if r := get("GET", open, scanner); r.StatusCode != 200 || r.Header.Get("Content-Type") != "image/gif" {
		t.Fatalf("pixel = %d %q", r.StatusCode, r.Header.Get("Content-Type"))
	}
	tampered := order[:len(order)-3] + "AAA"
	if r := get("GET", tampered, person); r.StatusCode != 404 || r.Header.Get("Location") != "" {
		t.Errorf("tampered link = %d %q, want 404 and no redirect", r.StatusCode, r.Header.Get("Location"))
	}
	if r := get("GET", strings.Replace(open, "/t/o/", "/t/c/", 1), person); r.StatusCode != 404 {
		t.Errorf("open token as a click = %d, want 404", r.StatusCode)
	}

	_, n := call("GET", "/v1/notifications/"+res["id"].(string), servertest.AdminToken, nil)
	id := n["deliveries"].([]any)[0].(map[string]any)["id"].(string)
	events := func() []string {
		_, d := call("GET", "/v1/deliveries/"+id, servertest.AdminToken, nil)
		var out []string
		for _, e := range d["events"].([]any) {
			e := e.(map[string]any)
			s := fmt.Sprint(e["type"], " ", e["source"], " ", e["detail"])
			if e["machine"] == true {
				s += " machine"
			}
			out = append(out, s)
		}
		return out
	}
	want := []string{"clicked notifyd https://shop.test/orders/42?a=1&b=2 machine", "opened notifyd  machine"}
	if got := events(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events = %q, want %q", got, want)
	}

	// A person, past the machine window of the send: each click once per
	// URL, however often followed.
	signer, _ := tracking.New(servertest.TokenSecret)
	l, ok := signer.Verify(strings.TrimPrefix(open, "/t/o/"), tracking.Open)
	if !ok || l.Delivery != id {
		t.Fatalf("pixel token = %+v %v, want delivery %s", l, ok, id)
	}
	servertest.Eventually(t, 10*time.Second, "past the machine window", func() bool {
		return time.Since(l.Issued) > tracking.MachineWindow
	})
	for range 2 {
		if r := get("GET", order, person); r.StatusCode != 302 || r.Header.Get("Location") != "https://shop.test/orders/42?a=1&b=2" {
			t.Fatalf("click = %d %q", r.StatusCode, r.Header.Get("Location"))
		}
	}
	if r := get("GET", help, person); r.StatusCode != 302 || r.Header.Get("Location") != "https://shop.test/help" {
		t.Fatalf("help click = %d %q", r.StatusCode, r.Header.Get("Location"))
	}
	get("GET", open, person)
	got := events()
	if len(got) != 5 || !containsAll(got, "clicked notifyd https://shop.test/orders/42?a=1&b=2",
		"clicked notifyd https://shop.test/help", "opened notifyd ") {
		t.Errorf("events = %q", got)
	}
}

func containsAll(list []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, s := range list {
			found = found || s == w
		}
		if !found {
			return false
		}
	}
	return true
}

// Tracking needs the public base URL its links go to.
func TestTrackingNeedsPublicBaseURL(t *testing.T) {
	cfg, err := config.Parse("test.yaml", []byte(servertest.BaseConfig+`
  order.shipped:
    channels:
      email: {subject: "s", html: "<p>x</p>", track: {opens: true}}
channels:
  email: {from: "Shop <shop@shop.test>", smtp: [{host: 127.0.0.1, port: 2525}]}
`))
	if err == nil {
		_, err = builtin.MustRegistry().Open(cfg, nil, nil)
	}
	if err == nil || !strings.Contains(err.Error(), "notifiers.order.shipped.channels.email.track: needs channels.email.unsubscribe_url") {
		t.Fatalf("Open = %v, want track refused without unsubscribe_url", err)
	}
}
