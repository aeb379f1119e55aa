package webpush

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// recordSize is the aes128gcm record size sent in the header. The whole
// message is one record: push services take at most 4096 bytes of body.
const recordSize = 4096

// headerLen is the aes128gcm header with a P-256 key id: salt (16), record
// size (4), key id length (1) and the sender's public key (65).
const headerLen = 16 + 4 + 1 + 65

// MaxPayload is the largest plaintext one push message carries: 4096 bytes
// of body less the header, the padding delimiter and the GCM tag.
const MaxPayload = recordSize - headerLen - 1 - 16

// encrypt encrypts plaintext for a browser subscription as RFC 8291 says
// (Message Encryption for Web Push, aes128gcm content coding of RFC 8188):
// uaPublic is the subscription's p256dh, auth its auth secret, as the
// application server's one-time key pair and salt a random 16 bytes. The
// result is the request body: the header, then the single record.
func encrypt(plaintext, uaPublic, auth []byte, as *ecdh.PrivateKey, salt []byte) ([]byte, error) {
	if len(plaintext) > MaxPayload {
		return nil, fmt.Errorf("payload is %d bytes, more than a push message carries (%d)", len(plaintext), MaxPayload)
	}
	if len(salt) != 16 {
		return nil, errors.New("salt must be 16 bytes")
	}
	ua, err := ecdh.P256().NewPublicKey(uaPublic)
	if err != nil {
		return nil, fmt.Errorf("p256dh: %w", err)
	}
	secret, err := as.ECDH(ua)
	if err != nil {
		return nil, err
	}
	asPublic := as.PublicKey().Bytes()
	// IKM = HKDF(auth, ecdh_secret, "WebPush: info" || 0 || ua_public || as_public, 32)
	keyInfo := "WebPush: info\x00" + string(uaPublic) + string(asPublic)
	ikm, err := hkdf.Key(sha256.New, secret, auth, keyInfo, 32)
	if err != nil {
		return nil, err
	}
	prk, err := hkdf.Extract(sha256.New, ikm, salt)
	if err != nil {
		return nil, err
	}
	cek, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, err
	}
	nonce, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: nonce\x00", 12)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, err
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	out := make([]byte, headerLen, headerLen+len(plaintext)+1+gcm.Overhead())
	copy(out, salt)
	binary.BigEndian.PutUint32(out[16:], recordSize)
	out[20] = byte(len(asPublic))
	copy(out[21:], asPublic)
	record := append(append(make([]byte, 0, len(plaintext)+1), plaintext...), 0x02) // the last record's delimiter, no padding
	// The only record has sequence number 0: its nonce is NONCE itself.
	return gcm.Seal(out, nonce, record, nil), nil
}

// encryptFor encrypts plaintext for the subscription keys (base64url) with a
// fresh key pair and salt.
func encryptFor(plaintext []byte, p256dh, auth string) ([]byte, error) {
	ua, au, err := decodeKeys(p256dh, auth)
	if err != nil {
		return nil, err
	}
	as, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	return encrypt(plaintext, ua, au, as, salt)
}

// DecodeBase64URL decodes unpadded base64url, the form browsers and
// web-push libraries exchange keys in; padding and standard base64's + and
// / are accepted too.
func DecodeBase64URL(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	s = strings.NewReplacer("+", "-", "/", "_").Replace(s)
	return base64.RawURLEncoding.DecodeString(s)
}

// CheckKeys checks a browser subscription's keys: p256dh must be the
// base64url of an uncompressed P-256 point (65 bytes) and auth of 16 bytes.
// The error names the key ("p256dh" or "auth").
func CheckKeys(p256dh, auth string) (field string, err error) {
	_, _, err = decodeKeys(p256dh, auth)
	var ke *keyError
	if errors.As(err, &ke) {
		return ke.field, ke.err
	}
	return "", err
}

type keyError struct {
	field string
	err   error
}

func (e *keyError) Error() string { return e.field + ": " + e.err.Error() }

func decodeKeys(p256dh, auth string) (ua, au []byte, err error) {
	ua, err = DecodeBase64URL(p256dh)
	switch {
	case p256dh == "":
		return nil, nil, &keyError{"p256dh", errors.New("is required")}
	case err != nil:
		return nil, nil, &keyError{"p256dh", errors.New("not base64url")}
	case len(ua) != 65 || ua[0] != 4:
		return nil, nil, &keyError{"p256dh", fmt.Errorf("want an uncompressed P-256 public key (65 bytes), got %d bytes", len(ua))}
	}
	if _, err := ecdh.P256().NewPublicKey(ua); err != nil {
		return nil, nil, &keyError{"p256dh", errors.New("not a point on the P-256 curve")}
	}
	au, err = DecodeBase64URL(auth)
	switch {
	case auth == "":
		return nil, nil, &keyError{"auth", errors.New("is required")}
	case err != nil:
		return nil, nil, &keyError{"auth", errors.New("not base64url")}
	case len(au) != 16:
		return nil, nil, &keyError{"auth", fmt.Errorf("want a 16-byte secret, got %d bytes", len(au))}
	}
	return ua, au, nil
}

// GenerateVAPIDKeys returns a new application server key pair as web-push
// libraries exchange them: unpadded base64url of the uncompressed P-256
// public point (65 bytes) and of the private scalar (32 bytes).
func GenerateVAPIDKeys() (public, private string, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	d, err := k.Bytes()
	if err != nil {
		return "", "", err
	}
	pub, err := k.PublicKey.Bytes()
	if err != nil {
		return "", "", err
	}
	return base64.RawURLEncoding.EncodeToString(pub), base64.RawURLEncoding.EncodeToString(d), nil
}

// parseVAPIDKeys decodes a key pair and checks that the public key is the
// private key's.
func parseVAPIDKeys(public, private string) (*ecdsa.PrivateKey, error) {
	pub, err := DecodeBase64URL(public)
	if err != nil || len(pub) != 65 || pub[0] != 4 {
		return nil, &keyError{"vapid_public_key", fmt.Errorf("want unpadded base64url of an uncompressed P-256 point (65 bytes)")}
	}
	if _, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), pub); err != nil {
		return nil, &keyError{"vapid_public_key", errors.New("not a point on the P-256 curve")}
	}
	d, err := DecodeBase64URL(private)
	if err != nil || len(d) != 32 {
		return nil, &keyError{"vapid_private_key", fmt.Errorf("want unpadded base64url of a P-256 private key (32 bytes)")}
	}
	k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d)
	if err != nil {
		return nil, &keyError{"vapid_private_key", fmt.Errorf("not a P-256 private key: %v", err)}
	}
	got, err := k.PublicKey.Bytes()
	if err != nil || string(got) != string(pub) {
		return nil, &keyError{"vapid_public_key", errors.New("is not the public key of vapid_private_key")}
	}
	return k, nil
}
