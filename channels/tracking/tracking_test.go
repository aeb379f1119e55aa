package tracking

import (
	"strings"
	"testing"
	"time"
)

func TestTokensVerifyOnlyAsSigned(t *testing.T) {
	s, err := New("secret")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_800_000_000, 0).UTC()
	c := Link{Kind: Click, Delivery: "0190-d", Issued: at, URL: "https://shop.test/o?a=1&b=2"}
	tok := s.Token(c)
	if got, ok := s.Verify(tok, Click); !ok || got != c {
		t.Fatalf("Verify = %+v %v, want %+v", got, ok, c)
	}
	if _, ok := s.Verify(tok, Open); ok {
		t.Error("a click token verified as an open")
	}
	// Another URL under the same mac: the payload is what is signed.
	forged := Link{Kind: Click, Delivery: "0190-d", Issued: at, URL: "https://evil.test/"}
	ftok := strings.Split(s.Token(forged), ".")[0] + "." + strings.Split(tok, ".")[1]
	if _, ok := s.Verify(ftok, Click); ok {
		t.Error("a token with another URL verified under the original mac")
	}
	other, _ := New("other secret")
	if _, ok := other.Verify(tok, Click); ok {
		t.Error("another secret's token verified")
	}
	for _, bad := range []string{"", ".", "x.y", tok + "A", "A" + tok} {
		if _, ok := s.Verify(bad, Click); ok {
			t.Errorf("Verify(%q) succeeded", bad)
		}
	}
	o := Link{Kind: Open, Delivery: "0190-d", Issued: at}
	if got, ok := s.Verify(s.Token(o), Open); !ok || got != o {
		t.Errorf("open Verify = %+v %v", got, ok)
	}
}

func TestRewrite(t *testing.T) {
	s, _ := New("secret")
	rw := &Rewriter{Signer: s, Base: "https://n.test", Skip: func(u string) bool { return strings.Contains(u, "unsubscribe") }}
	in := `<html><body><a href="https://shop.test/o?a=1&amp;b=2">Order</a> <a class=x href='mailto:a@b.test'>m</a>` +
		` <a href="https://shop.test/unsubscribe">u</a> <a href="/relative">r</a></body></html>`
	at := time.Unix(1_800_000_000, 0)
	out := rw.Rewrite(in, "d1", at, true, true)
	if !strings.Contains(out, `<a href="https://n.test/t/c/`) || strings.Contains(out, "shop.test/o?") {
		t.Errorf("http link not rewritten: %s", out)
	}
	for _, keep := range []string{`href='mailto:a@b.test'`, `href="https://shop.test/unsubscribe"`, `href="/relative"`} {
		if !strings.Contains(out, keep) {
			t.Errorf("%s was rewritten: %s", keep, out)
		}
	}
	if !strings.Contains(out, `<img src="https://n.test/t/o/`) || !strings.HasSuffix(out, `"></body></html>`) {
		t.Errorf("no pixel before </body>: %s", out)
	}
	// The link carries the URL the reader saw, unescaped.
	i := strings.Index(out, "/t/c/") + len("/t/c/")
	tok := out[i : i+strings.IndexByte(out[i:], '"')]
	if l, ok := s.Verify(tok, Click); !ok || l.URL != "https://shop.test/o?a=1&b=2" || l.Delivery != "d1" {
		t.Errorf("click link = %+v %v", l, ok)
	}
	if got := rw.Rewrite(in, "d1", at, false, false); got != in {
		t.Errorf("nothing on, got %s", got)
	}
}

func TestMachine(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	l := Link{Kind: Open, Issued: at}
	later := at.Add(time.Minute)
	person := "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko)"
	for _, c := range []struct {
		method, ua string
		now        time.Time
		want       bool
	}{
		{"GET", person, later, false},
		{"HEAD", person, later, true},
		{"GET", "Mozilla/5.0", later, true},
		{"GET", "", later, true},
		{"GET", "Mozilla/5.0 (compatible; BingPreview/1.0b)", later, true},
		{"GET", person, at.Add(time.Second), true},
	} {
		if got := Machine(l, c.now, c.method, c.ua); got != c.want {
			t.Errorf("Machine(%s %q at +%v) = %v", c.method, c.ua, c.now.Sub(at), got)
		}
	}
	if EventKey(l, false) == EventKey(l, true) || EventKey(Link{Kind: Click, URL: "a"}, false) == EventKey(Link{Kind: Click, URL: "b"}, false) {
		t.Error("event keys collide")
	}
}
