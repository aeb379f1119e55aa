package web_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd/server/servertest"
)

// A minimal Chrome DevTools Protocol client over --remote-debugging-pipe:
// Chromium reads commands from its fd 3 and writes answers and events to its
// fd 4, each one JSON message ended by a NUL byte. No websocket, no module.

// EnvChromium names a Chromium binary to use instead of looking one up.
const EnvChromium = "NOTIFYD_CHROMIUM"

// EnvRequireBrowser, when set, turns a missing Chromium into a failure instead
// of a skip (for CI images that install it).
const EnvRequireBrowser = "NOTIFYD_REQUIRE_BROWSER"

// findChromium returns the browser to drive, or skips the test with the
// reason (fails when EnvRequireBrowser is set).
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(EnvChromium); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "Chromium is not installed, so the browser test of <notifyd-inbox> and <notifyd-preferences> did not run. " +
		"Install Debian's package (apt-get install -y chromium) or set " + EnvChromium + " to a Chromium/Chrome binary."
	if os.Getenv(EnvRequireBrowser) != "" {
		t.Fatal(msg + " (" + EnvRequireBrowser + " is set: a missing browser is a failure)")
	}
	t.Skip(msg)
	return ""
}

type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

type browser struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     *os.File // our end of Chromium's fd 3
	stderr *bytes.Buffer

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan cdpMessage
	console []string // console messages and exceptions of the page
	done    chan struct{}
}

// startBrowser launches headless Chromium with the debugging pipe. It is
// closed when the test ends; its stderr and the page's console are logged
// when the test fails.
func startBrowser(t *testing.T, bin string) *browser {
	t.Helper()
	profile := t.TempDir()
	// Our write end -> Chromium's fd 3; Chromium's fd 4 -> our read end.
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, in: cmdW, stderr: &bytes.Buffer{}, pending: map[int64]chan cdpMessage{}, done: make(chan struct{})}
	b.cmd = exec.Command(bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--no-default-browser-check", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--disable-extensions", "--disable-dev-shm-usage", "--mute-audio",
		"--window-size=1024,768", "--user-data-dir="+profile, "--remote-debugging-pipe", "about:blank")
	b.cmd.ExtraFiles = []*os.File{cmdR, outW}
	b.cmd.Stderr = &lockedWriter{w: b.stderr}
	b.cmd.Stdout = b.cmd.Stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	cmdR.Close()
	outW.Close()
	go b.read(outR)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = b.call(ctx, "", "Browser.close", nil)
		exited := make(chan struct{})
		go func() { _ = b.cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-exited
		}
		cmdW.Close()
		if t.Failed() {
			b.mu.Lock()
			t.Logf("page console:\n%s", strings.Join(b.console, "\n"))
			b.mu.Unlock()
			t.Logf("chromium output:\n%s", b.stderr.String())
		}
	})
	return b
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (b *browser) read(f *os.File) {
	defer close(b.done)
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		raw, err := r.ReadBytes(0)
		if err != nil {
			return
		}
		var m cdpMessage
		if err := json.Unmarshal(raw[:len(raw)-1], &m); err != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if c, ok := b.pending[m.ID]; ok {
				delete(b.pending, m.ID)
				c <- m
			}
		} else {
			b.event(m)
		}
		b.mu.Unlock()
	}
}

// event keeps what the page logs; called with mu held.
func (b *browser) event(m cdpMessage) {
	switch m.Method {
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		_ = json.Unmarshal(m.Params, &p)
		parts := []string{p.Type + ":"}
		for _, a := range p.Args {
			if a.Description != "" {
				parts = append(parts, a.Description)
			} else {
				parts = append(parts, fmt.Sprint(a.Value))
			}
		}
		b.console = append(b.console, strings.Join(parts, " "))
	case "Runtime.exceptionThrown":
		b.console = append(b.console, "exception: "+string(m.Params))
	case "Log.entryAdded":
		b.console = append(b.console, "log: "+string(m.Params))
	}
}

// call sends one command (to the browser when session is "") and waits for
// its answer.
func (b *browser) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	if params == nil {
		params = struct{}{}
	}
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	c := make(chan cdpMessage, 1)
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	b.pending[id] = c
	b.mu.Unlock()
	msg, _ := json.Marshal(cdpMessage{ID: id, Method: method, Params: p, SessionID: session})
	if _, err := b.in.Write(append(msg, 0)); err != nil {
		return nil, fmt.Errorf("%s: write to chromium: %w", method, err)
	}
	select {
	case m := <-c:
		if m.Error != nil {
			return nil, fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		return m.Result, nil
	case <-b.done:
		return nil, fmt.Errorf("%s: chromium exited", method)
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// page is one tab, attached with a flat session.
type page struct {
	b       *browser
	t       *testing.T
	session string
}

func (b *browser) newPage(ctx context.Context) *page {
	b.t.Helper()
	res, err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"})
	if err != nil {
		b.t.Fatal(err)
	}
	var target struct {
		TargetID string `json:"targetId"`
	}
	_ = json.Unmarshal(res, &target)
	res, err = b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true})
	if err != nil {
		b.t.Fatal(err)
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	_ = json.Unmarshal(res, &att)
	p := &page{b: b, t: b.t, session: att.SessionID}
	for _, m := range []string{"Page.enable", "Runtime.enable", "Log.enable"} {
		p.call(ctx, m, nil)
	}
	return p
}

func (p *page) call(ctx context.Context, method string, params any) json.RawMessage {
	p.t.Helper()
	res, err := p.b.call(ctx, p.session, method, params)
	if err != nil {
		p.t.Fatal(err)
	}
	return res
}

// evalErr evaluates a JavaScript expression in the page (promises awaited)
// and unmarshals its JSON value into out (when out is not nil).
func (p *page) evalErr(ctx context.Context, expr string, out any) error {
	res, err := p.b.call(ctx, p.session, "Runtime.evaluate", map[string]any{
		"expression": expr, "returnByValue": true, "awaitPromise": true, "userGesture": true,
	})
	if err != nil {
		return err
	}
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("%s: %s", r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if out != nil && len(r.Result.Value) > 0 {
		return json.Unmarshal(r.Result.Value, out)
	}
	return nil
}

func (p *page) eval(ctx context.Context, expr string, out any) {
	p.t.Helper()
	if err := p.evalErr(ctx, expr, out); err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
}

// browserBudget is a browser test's overall deadline. Every wait inside it
// waits on the state it needs until then, so only a real failure (a state
// that never comes) reaches it, on a loaded machine too.
const browserBudget = 5 * time.Minute

// browserContext is the test's context with its overall deadline:
// browserBudget, or sooner when go test's -timeout ends first (less a margin
// to report the failure and clean up).
func browserContext(t *testing.T) context.Context {
	t.Helper()
	deadline := time.Now().Add(browserBudget)
	if d, ok := t.Deadline(); ok && d.Add(-30*time.Second).Before(deadline) {
		deadline = d.Add(-30 * time.Second)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

// left is what remains of ctx's deadline: the timeout of a wait that takes
// one (servertest.Eventually, the mailbox's WaitFor) inside a browser test.
func left(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), 0)
	}
	return browserBudget
}

// waitFor polls expr until it is true, until ctx's deadline (the test's,
// browserContext); then it fails with what, and with the value of state
// (an expression describing the page) when given.
func (p *page) waitFor(ctx context.Context, what, expr, state string) {
	p.t.Helper()
	start := time.Now()
	var ok bool
	var lastErr error
	servertest.Wait(left(ctx), func() bool {
		lastErr = p.evalErr(ctx, "Boolean("+expr+")", &ok)
		return (lastErr == nil && ok) || ctx.Err() != nil
	})
	if lastErr == nil && ok {
		return
	}
	// The page is described on a context of its own: ctx has ended.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var s any
	if state != "" {
		_ = p.evalErr(sctx, state, &s)
	}
	p.t.Fatalf("gave up after %s waiting for %s (%s); page state: %v; last error: %v",
		time.Since(start).Round(time.Second), what, expr, s, lastErr)
}

// click scrolls the element expr names into view and clicks its centre with
// real mouse events.
func (p *page) click(ctx context.Context, expr string) {
	p.t.Helper()
	var rect struct{ X, Y float64 }
	p.eval(ctx, `(() => { const el = `+expr+`; if (!el) throw new Error(`+jsString("nothing to click: "+expr)+`);
		el.scrollIntoView({block: "center"}); const r = el.getBoundingClientRect();
		return {X: r.left + r.width / 2, Y: r.top + r.height / 2}; })()`, &rect)
	for _, typ := range []string{"mouseMoved", "mousePressed", "mouseReleased"} {
		params := map[string]any{"type": typ, "x": rect.X, "y": rect.Y}
		if typ != "mouseMoved" {
			params["button"] = "left"
			params["clickCount"] = 1
		}
		p.call(ctx, "Input.dispatchMouseEvent", params)
	}
}

// navigate loads url and waits for the document to be complete.
func (p *page) navigate(ctx context.Context, url string) {
	p.t.Helper()
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	if err := json.Unmarshal(p.call(ctx, "Page.navigate", map[string]any{"url": url}), &nav); err != nil || nav.ErrorText != "" {
		p.t.Fatalf("navigate %s: %v %s", url, err, nav.ErrorText)
	}
	p.waitFor(ctx, "the page to load", `document.readyState === "complete" && location.href === `+jsString(url), "location.href")
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
