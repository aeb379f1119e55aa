package webpush

import (
	"bytes"
	"crypto/ecdh"
	"testing"

	"github.com/notifyd/notifyd/internal/testing/pushtest"
)

func b64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := DecodeBase64URL(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEncryptRFC8291 holds encrypt to the example of RFC 8291's appendix:
// the same keys and salt give the same bytes, header and ciphertext, and
// the browser's half decrypts them.
func TestEncryptRFC8291(t *testing.T) {
	t.Parallel()
	as, err := ecdh.P256().NewPrivateKey(b64(t, "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"))
	if err != nil {
		t.Fatal(err)
	}
	uaPublic := b64(t, "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4")
	auth := b64(t, "BTBZMqHH6r4Tts7J_aSIgg")
	got, err := encrypt([]byte("When I grow up, I want to be a watermelon"), uaPublic, auth, as, b64(t, "DGv6ra1nlYgDCS1FRnbzlw"))
	if err != nil {
		t.Fatal(err)
	}
	want := b64(t, "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN")
	if !bytes.Equal(got, want) {
		t.Fatalf("encrypt of the RFC 8291 example:\n got %x\nwant %x", got, want)
	}
	ua, err := ecdh.P256().NewPrivateKey(b64(t, "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := pushtest.Decrypt(got, ua, auth)
	if err != nil || string(plain) != "When I grow up, I want to be a watermelon" {
		t.Fatalf("decrypt: %q, %v", plain, err)
	}
}

func TestCheckKeys(t *testing.T) {
	t.Parallel()
	good := "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
	for _, tc := range []struct{ p256dh, auth, field string }{
		{good, "BTBZMqHH6r4Tts7J_aSIgg", ""},
		{good, "BTBZMqHH6r4Tts7J_aSIgg==", ""},
		{"", "BTBZMqHH6r4Tts7J_aSIgg", "p256dh"},
		{"not base64!", "BTBZMqHH6r4Tts7J_aSIgg", "p256dh"},
		{good[:40], "BTBZMqHH6r4Tts7J_aSIgg", "p256dh"},
		{"B" + good[1:len(good)-2] + "AA", "BTBZMqHH6r4Tts7J_aSIgg", "p256dh"}, // off the curve
		{good, "", "auth"},
		{good, "BTBZMqHH6r4Tts7J", "auth"},
	} {
		field, err := CheckKeys(tc.p256dh, tc.auth)
		if field != tc.field || (tc.field == "") != (err == nil) {
			t.Errorf("CheckKeys(%q, %q) = %q, %v; want field %q", tc.p256dh, tc.auth, field, err, tc.field)
		}
	}
}

func TestVAPIDKeys(t *testing.T) {
	t.Parallel()
	pub, priv, err := GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	if len(b64(t, pub)) != 65 || len(b64(t, priv)) != 32 {
		t.Fatalf("key lengths %d, %d", len(b64(t, pub)), len(b64(t, priv)))
	}
	if _, err := parseVAPIDKeys(pub, priv); err != nil {
		t.Fatal(err)
	}
	pub2, _, _ := GenerateVAPIDKeys()
	if _, err := parseVAPIDKeys(pub2, priv); err == nil {
		t.Fatal("a public key of another pair was accepted")
	}
}
