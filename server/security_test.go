package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/server/servertest"
)

// daemon runs a server on 127.0.0.1 with BaseConfig changed by change, and
// returns its base URL.
func daemon(t *testing.T, change func(*config.Config)) string {
	t.Helper()
	_, url := pgtest.NewDBURL(t)
	cfg := servertest.Config(t, "")
	cfg.Database.URL = url
	change(cfg)
	return runDaemon(t, cfg)
}

// runDaemon runs a server with cfg on 127.0.0.1 until the test ends, waits
// until its API answers, and returns its base URL.
func runDaemon(t *testing.T, cfg *config.Config) string {
	t.Helper()
	d, stop := startDaemon(t, cfg)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return "http://" + d.Addr()
}

// startDaemon runs a server with cfg on 127.0.0.1 and waits until its API
// answers; stop ends Run and returns its error (the server is closed when
// the test ends).
func startDaemon(t *testing.T, cfg *config.Config) (d *server.Server, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d, err = server.New(context.Background(), server.Options{Config: cfg, Listener: ln, Logger: servertest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	base := "http://" + d.Addr()
	servertest.Eventually(t, 10*time.Second, "the API answers", func() bool {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	var once sync.Once
	var runErr error
	return d, func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
}

// dialRaw opens a TCP connection to base's host that fails the test's reads
// after guard: the bound of a test that waits for the server to act.
func dialRaw(t *testing.T, base string, guard time.Duration) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(guard))
	return c
}

// readUntilClosed reads c until the server closes it; a read that times out
// (the guard deadline) fails the test.
func readUntilClosed(t *testing.T, c net.Conn, what string) []byte {
	t.Helper()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("%s: the server did not close the connection: %v (read %q)", what, err, got)
	}
	return got
}

// TestHTTPServerCutsSlowAndIdleClients: a request whose declared body never
// arrives is cut off at http.read_timeout, a header block sent slowly at
// http.read_header_timeout, an idle keep-alive connection is closed at
// http.idle_timeout, and a header block over http.max_header_bytes is a 431.
func TestHTTPServerCutsSlowAndIdleClients(t *testing.T) {
	t.Parallel()
	base := daemon(t, func(c *config.Config) {
		c.HTTP.ReadHeaderTimeout = config.Duration(300 * time.Millisecond)
		c.HTTP.ReadTimeout = config.Duration(500 * time.Millisecond)
		c.HTTP.IdleTimeout = config.Duration(500 * time.Millisecond)
		c.HTTP.MaxHeaderBytes = 8 << 10
	})
	const guard = 10 * time.Second // far above every timeout: reaching it means no timeout

	t.Run("body declared and never sent", func(t *testing.T) {
		t.Parallel()
		c := dialRaw(t, base, guard)
		fmt.Fprintf(c, "POST /v1/notifications HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"notifier\":", servertest.AdminToken)
		readUntilClosed(t, c, "a body that never arrives")
	})
	t.Run("headers never finished", func(t *testing.T) {
		t.Parallel()
		c := dialRaw(t, base, guard)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
		readUntilClosed(t, c, "headers that never end")
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		t.Parallel()
		c := dialRaw(t, base, guard)
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 || resp.Close {
			t.Fatalf("first request: %v %v", resp, err)
		}
		// The connection is kept alive; nothing more is sent on it.
		readUntilClosed(t, c, "an idle keep-alive connection")
	})
	t.Run("header block over the cap", func(t *testing.T) {
		t.Parallel()
		req, _ := http.NewRequest("GET", base+"/healthz", nil)
		req.Header.Set("X-Big", strings.Repeat("x", 64<<10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("64 KiB header = %d, want 431", resp.StatusCode)
		}
	})
}

// TestStreamOutlivesTheWriteTimeout: http.write_timeout and
// http.read_timeout bound ordinary requests, but an inbox stream keeps
// delivering events after both have passed: the stream sets its own
// deadline per write, and net/http lifts the read deadline once a request's
// body is read.
func TestStreamOutlivesTheWriteTimeout(t *testing.T) {
	t.Parallel()
	const writeTimeout = 500 * time.Millisecond
	base := daemon(t, func(c *config.Config) {
		c.HTTP.WriteTimeout = config.Duration(writeTimeout)
		c.HTTP.ReadTimeout = config.Duration(writeTimeout)
		c.HTTP.IdleTimeout = config.Duration(writeTimeout)
	})
	tok, err := notifyd.RecipientToken(servertest.TokenSecret, "u2", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", base+"/v1/inbox/stream", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	events := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				events <- name
			}
		}
		close(events)
	}()
	if ev := <-events; ev != "counts" {
		t.Fatalf("first event %q, want counts", ev)
	}
	// What is under test is the passing of time: the server's write
	// deadline for this request has expired once this timer fires.
	<-time.After(2 * writeTimeout)
	body := `{"notifier":"comment.created","key":"late","recipients":["u2"],"params":{"post_title":"T","author_name":"A"}}`
	sreq, _ := http.NewRequest("POST", base+"/v1/notifications", strings.NewReader(body))
	sreq.Header.Set("Authorization", "Bearer "+servertest.AdminToken)
	sresp, err := http.DefaultClient.Do(sreq)
	if err != nil {
		t.Fatal(err)
	}
	sresp.Body.Close()
	if sresp.StatusCode != 202 {
		t.Fatalf("send: %d", sresp.StatusCode)
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the stream ended after the write timeout")
			}
			if ev == "inbox.created" {
				return
			}
		case <-timeout:
			t.Fatal("no inbox.created within 20 s")
		}
	}
}

// TestMaxConnections: with http.max_connections 1, a second connection is
// not served while the first is open, and is served once it closes.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	base := daemon(t, func(c *config.Config) { c.HTTP.MaxConnections = 1 })
	first := dialRaw(t, base, 10*time.Second)
	fmt.Fprintf(first, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(first), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first connection: %v %v", resp, err)
	}
	second := dialRaw(t, base, 10*time.Second)
	fmt.Fprintf(second, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	// A bounded wait for something that must not happen.
	_ = second.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if n, err := second.Read(make([]byte, 1)); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the second connection was served while the first was open: %d bytes, %v", n, err)
	}
	first.Close()
	_ = second.SetReadDeadline(time.Now().Add(10 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(second), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("second connection after the first closed: %v %v", resp, err)
	}
}
