package unsubscribe_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels/unsubscribe"
)

func TestSignVerify(t *testing.T) {
	t.Parallel()
	s, err := unsubscribe.NewSigner("a-secret-of-at-least-thirty-two-bytes")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := unsubscribe.NewSigner("another-secret-of-at-least-32-bytes!")
	issued := time.Now().Add(-time.Hour).Truncate(time.Second).UTC()
	want := unsubscribe.Token{Channel: "email", Recipient: "u1>, <https://evil.test/x\r\nBcc: a@b", Scopes: []string{"category:comments", "notifier:x"},
		IssuedAt: issued, Expires: issued.Add(2 * time.Hour)}
	tok, err := s.Sign(want)
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(tok, "<>,\r\n /?") {
		t.Fatalf("token %q is not URL-safe", tok)
	}
	got, err := s.Verify(tok)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Verify = %+v, %v; want %+v", got, err, want)
	}
	// Tampered: every changed byte, the mac cut, another secret.
	bad := []string{"", "x", tok + "A", tok[:len(tok)-1], strings.Replace(tok, ".", "", 1), "." + tok}
	for i := range len(tok) {
		b := []byte(tok)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		bad = append(bad, string(b))
	}
	for _, b := range bad {
		if _, err := s.Verify(b); !errors.Is(err, unsubscribe.ErrInvalid) && b != tok {
			t.Errorf("Verify(%q) = %v, want ErrInvalid", b, err)
		}
	}
	if _, err := other.Verify(tok); !errors.Is(err, unsubscribe.ErrInvalid) {
		t.Errorf("a token of another secret verified: %v", err)
	}
	if _, err := unsubscribe.NewSigner(""); err == nil {
		t.Error("empty secret accepted")
	}
	if _, err := s.Sign(unsubscribe.Token{Channel: "email", Recipient: "u1"}); err == nil {
		t.Error("token without scopes signed")
	}
	if _, err := s.Sign(unsubscribe.Token{Channel: "email", Recipient: "u\x001", Scopes: []string{"*"}}); err == nil {
		t.Error("token with NUL signed")
	}
}

// A token works until its expiry, and not from then on; one signed without
// dates expires after DefaultTTL.
func TestTokensExpire(t *testing.T) {
	t.Parallel()
	s, err := unsubscribe.NewSigner("a-secret-of-at-least-thirty-two-bytes")
	if err != nil {
		t.Fatal(err)
	}
	issued := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tok, err := s.Sign(unsubscribe.Token{Channel: "email", Recipient: "u1", Scopes: []string{"*"}, IssuedAt: issued,
		Expires: issued.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.VerifyAt(tok, issued.Add(59*time.Minute)); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	if _, err := s.VerifyAt(tok, issued.Add(time.Hour)); !errors.Is(err, unsubscribe.ErrExpired) {
		t.Fatalf("at expiry: %v, want ErrExpired", err)
	}
	def, err := s.Sign(unsubscribe.Token{Channel: "email", Recipient: "u1", Scopes: []string{"*"}, IssuedAt: issued})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.VerifyAt(def, issued.Add(unsubscribe.DefaultTTL-time.Second)); err != nil || !got.Expires.Equal(issued.Add(unsubscribe.DefaultTTL)) {
		t.Fatalf("default expiry: %+v, %v", got, err)
	}
	if _, err := s.VerifyAt(def, issued.Add(unsubscribe.DefaultTTL)); !errors.Is(err, unsubscribe.ErrExpired) {
		t.Fatalf("after DefaultTTL: %v, want ErrExpired", err)
	}
	if _, err := s.Sign(unsubscribe.Token{Channel: "email", Recipient: "u1", Scopes: []string{"*"}, IssuedAt: issued, Expires: issued}); err == nil {
		t.Fatal("a token expiring as it is issued was signed")
	}
}
