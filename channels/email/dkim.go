package email

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/emersion/go-msgauth/dkim"
)

// DKIM is channels.email.dkim: sign every message with the private key in
// PrivateKeyFile (PEM: PKCS#8 RSA or Ed25519, or PKCS#1 RSA), publishing the
// public key as the TXT record <Selector>._domainkey.<Domain>. A relative
// PrivateKeyFile is read from the daemon's working directory.
type DKIM struct {
	Domain         string `yaml:"domain"`
	Selector       string `yaml:"selector"`
	PrivateKeyFile string `yaml:"private_key_file"`
}

// DKIMHeaders are the header fields the signature covers. A listed field
// the message does not have is signed as absent, so it cannot be added on
// the way without breaking the signature.
var DKIMHeaders = []string{"From", "To", "Subject", "Date", "Message-ID", "List-Unsubscribe",
	"List-Unsubscribe-Post", "MIME-Version", "Content-Type"}

// minRSABits is the smallest RSA key accepted: receivers ignore shorter
// signatures (RFC 8301).
const minRSABits = 1024

var dnsLabelRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)

// LoadDKIMKey reads the PEM private key at path: an RSA key of at least 1024
// bits (2048 is what to publish) or an Ed25519 key.
func LoadDKIMKey(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s holds no PEM block", path)
	}
	var key any
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("%s: PEM block %q is not a private key (want PRIVATE KEY or RSA PRIVATE KEY)", path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	switch k := key.(type) {
	case *rsa.PrivateKey:
		if k.N.BitLen() < minRSABits {
			return nil, fmt.Errorf("%s: RSA key of %d bits; receivers need at least %d (use 2048)", path, k.N.BitLen(), minRSABits)
		}
		return k, nil
	case ed25519.PrivateKey:
		return k, nil
	default:
		return nil, fmt.Errorf("%s: a %T key; DKIM signs with RSA or Ed25519", path, key)
	}
}

// checkDKIM reports what is wrong with a dkim section and returns the key
// when it loads.
func checkDKIM(d *DKIM) (crypto.Signer, []keyProblem) {
	var problems []keyProblem
	add := func(k, msg string) { problems = append(problems, keyProblem{k, msg}) }
	if d.Domain == "" {
		add("domain", "must be set (the domain of the From address, or its parent)")
	} else if !dnsLabelRE.MatchString(d.Domain) {
		add("domain", fmt.Sprintf("%q is not a domain name", d.Domain))
	}
	if d.Selector == "" {
		add("selector", "must be set (the DNS label of the key: <selector>._domainkey.<domain>)")
	} else if !dnsLabelRE.MatchString(d.Selector) {
		add("selector", fmt.Sprintf("%q is not a DNS label", d.Selector))
	}
	if d.PrivateKeyFile == "" {
		add("private_key_file", "must be set (a PEM RSA or Ed25519 private key)")
		return nil, problems
	}
	key, err := LoadDKIMKey(d.PrivateKeyFile)
	if err != nil {
		add("private_key_file", err.Error())
		return nil, problems
	}
	return key, problems
}

// keyProblem is one problem of a dkim section: its key and what is wrong.
type keyProblem struct{ key, msg string }

// dkimSigner signs rendered messages.
type dkimSigner struct {
	opts   dkim.SignOptions
	record string // the TXT record publishing the public key (DKIMRecord)
}

func newDKIMSigner(d *DKIM) (*dkimSigner, error) {
	key, problems := checkDKIM(d)
	if len(problems) > 0 {
		return nil, fmt.Errorf("email: channels.email.dkim.%s: %s", problems[0].key, problems[0].msg)
	}
	record, err := DKIMRecord(key)
	if err != nil {
		return nil, fmt.Errorf("email: channels.email.dkim: public key: %w", err)
	}
	return &dkimSigner{record: record, opts: dkim.SignOptions{Domain: d.Domain, Selector: d.Selector, Signer: key,
		HeaderCanonicalization: dkim.CanonicalizationRelaxed, BodyCanonicalization: dkim.CanonicalizationRelaxed,
		HeaderKeys: DKIMHeaders}}, nil
}

// sign returns raw (a whole message, CRLF line endings) with a
// DKIM-Signature header in front.
func (d *dkimSigner) sign(raw []byte) ([]byte, error) {
	var out bytes.Buffer
	out.Grow(len(raw) + 512)
	opts := d.opts
	if err := dkim.Sign(&out, bytes.NewReader(raw), &opts); err != nil {
		return nil, fmt.Errorf("dkim sign: %w", err)
	}
	return out.Bytes(), nil
}

// DKIMRecord returns the DNS TXT record that publishes key's public half
// ("v=DKIM1; k=rsa; p=…"), for docs and `notifyd check` output.
func DKIMRecord(key crypto.Signer) (string, error) {
	var k string
	var pub []byte
	switch p := key.Public().(type) {
	case *rsa.PublicKey:
		k = "rsa"
		var err error
		if pub, err = x509.MarshalPKIXPublicKey(p); err != nil {
			return "", err
		}
	case ed25519.PublicKey:
		k, pub = "ed25519", p
	default:
		return "", errors.New("unsupported key")
	}
	var b strings.Builder
	b.WriteString("v=DKIM1; k=" + k + "; p=")
	b.WriteString(base64.StdEncoding.EncodeToString(pub))
	return b.String(), nil
}
