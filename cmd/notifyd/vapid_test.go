package main

import (
	"strings"
	"testing"

	"github.com/notifyd/notifyd/channels/webpush"
)

func TestVAPIDKeys(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, "vapid-keys")
	if err != nil {
		t.Fatal(err)
	}
	var pub, priv string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		switch k {
		case "vapid_public_key":
			pub = v
		case "vapid_private_key":
			priv = v
		}
	}
	p, err := webpush.DecodeBase64URL(pub)
	if err != nil || len(p) != 65 {
		t.Fatalf("public key %q: %d bytes, %v", pub, len(p), err)
	}
	if d, err := webpush.DecodeBase64URL(priv); err != nil || len(d) != 32 {
		t.Fatalf("private key %q: %v", priv, err)
	}
	// The pair is one: the channel accepts it.
	if _, err := webpush.New(&webpush.Config{VAPIDPublicKey: pub, VAPIDPrivateKey: priv, Subject: "mailto:a@b.test"},
		nil, nil, webpush.Options{}); err != nil {
		t.Fatalf("the printed pair does not open the channel: %v", err)
	}
	if _, _, err := run(t, "vapid-keys", "extra"); err == nil {
		t.Error("vapid-keys accepted an argument")
	}
}
