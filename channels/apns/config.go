package apns

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/devicepush"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
)

// Name is the channel's name in config and in the ledger.
const Name = "apns"

// Platform is the device platform the channel sends to: devices registered
// with POST /v1/devices as {"platform": "ios", ...}.
const Platform = "ios"

// Plugin registers the APNs channel: per-recipient, to every iOS device the
// recipient registered. A recipient without one gets an `unavailable`
// delivery at fan-out time ("recipient has no ios devices").
var Plugin = channels.Plugin{
	Name:         Name,
	PerRecipient: true,
	Device:       &channels.DevicePlatform{Platform: Platform, CheckToken: CheckToken, CheckApp: CheckApp},
	DefaultMode:  notifytype.ModeImmediate,
	Open:         open,
}

// DefaultBaseURL is Apple's production push service, the default of
// channels.apns.base_url. Apps built for development register tokens of
// the sandbox, https://api.sandbox.push.apple.com.
const DefaultBaseURL = "https://api.push.apple.com"

// DefaultTimeout bounds one request when channels.apns.timeout is not set.
const DefaultTimeout = 10 * time.Second

// Config is the channels.apns section. Without it APNs deliveries are
// `unavailable`.
type Config struct {
	// KeyID is the signing key's id (10 characters, Apple Developer
	// account, Keys), the provider token's kid.
	KeyID string `yaml:"key_id"`
	// TeamID is the developer team's id (10 characters), the provider
	// token's iss.
	TeamID string `yaml:"team_id"`
	// PrivateKeyFile is the signing key as Apple gives it: a .p8 file, a
	// PEM PKCS#8 P-256 private key, read from the daemon's working
	// directory.
	PrivateKeyFile string `yaml:"private_key_file"`
	// Topic is the apns-topic of a push to a device registered without an
	// app; a device's own app (its bundle id) is used otherwise.
	Topic string `yaml:"topic"`
	// BaseURL is where the push service is; default DefaultBaseURL.
	BaseURL string `yaml:"base_url"`
	// CAFile is a PEM file of the certificate authorities to trust instead
	// of the system's: for a local stand-in of the service in tests.
	CAFile string `yaml:"ca_file"`
	// Timeout bounds one request; default 10s.
	Timeout config.Duration `yaml:"timeout"`
}

// SetDefaults sets the base URL and a 10 s timeout.
func (c *Config) SetDefaults() {
	c.BaseURL = DefaultBaseURL
	c.Timeout = config.Duration(DefaultTimeout)
}

// Templates is a notifier's apns section: text/templates over the params.
// Title is required; url, when it renders, goes in the payload for the app
// to open.
type Templates struct {
	Title string `yaml:"title"`
	Body  string `yaml:"body"`
	URL   string `yaml:"url"`

	parsed devicepush.Templates
}

var (
	// tokenRE: an APNs device token in hex (32 bytes today; Apple says not
	// to rely on the length, and allows up to 100).
	tokenRE = regexp.MustCompile(`^([0-9a-fA-F]{2}){32,100}$`)
	// bundleRE: a bundle id, reverse-DNS: letters, digits, '-' and '.'.
	bundleRE = regexp.MustCompile(`^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$`)
	idRE     = regexp.MustCompile(`^[A-Z0-9]{10}$`)
)

// CheckToken returns why token cannot be an APNs device token: hex, 32 to
// 100 bytes.
func CheckToken(token string) error {
	if !tokenRE.MatchString(token) {
		return errors.New("want an APNs device token: hex, 64 to 200 digits")
	}
	return nil
}

// CheckApp returns why app cannot be an iOS bundle id: "com.example.app",
// letters, digits, '-' and '.', at most 155 bytes.
func CheckApp(app string) error {
	if len(app) > 155 || !bundleRE.MatchString(app) {
		return fmt.Errorf("want an iOS bundle id such as com.example.app, got %q", app)
	}
	return nil
}

// LoadKey reads a provider token signing key: a PEM PKCS#8 P-256 private
// key (Apple's .p8 file).
func LoadKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the key file: %w", err)
	}
	return ParseKey(b)
}

// ParseKey is LoadKey on the file's content.
func ParseKey(b []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("the key file is not PEM (want Apple's .p8 file)")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the key file is not a PKCS#8 private key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, errors.New("the key file's key is not a P-256 (ES256) key")
	}
	return key, nil
}

func open(s *channels.Setup) (any, error) {
	p := s.Problems
	notifiers := channels.DecodeNotifiers(s, func(n channels.NotifierSection, t *Templates) {
		t.parsed = devicepush.CheckTemplates(p, n, t.Title, t.Body, t.URL)
	})
	if s.Section.Empty() {
		return nil, nil
	}
	cfg := &Config{}
	if !p.Decode(s.Section, cfg) {
		return nil, nil
	}
	sec := s.Section
	if !idRE.MatchString(cfg.KeyID) {
		p.Add(sec, "key_id", "want the signing key's id (10 upper-case letters and digits), got %q", cfg.KeyID)
	}
	if !idRE.MatchString(cfg.TeamID) {
		p.Add(sec, "team_id", "want the developer team's id (10 upper-case letters and digits), got %q", cfg.TeamID)
	}
	var key *ecdsa.PrivateKey
	if cfg.PrivateKeyFile == "" {
		p.Add(sec, "private_key_file", "must be set (the signing key's .p8 file)")
	} else {
		var err error
		if key, err = LoadKey(cfg.PrivateKeyFile); err != nil {
			p.Add(sec, "private_key_file", "%v", err)
		}
	}
	if cfg.Topic != "" {
		if err := CheckApp(cfg.Topic); err != nil {
			p.Add(sec, "topic", "%v", err)
		}
	}
	devicepush.CheckConnection(p, sec, cfg.BaseURL, cfg.CAFile, cfg.Timeout)
	if p.Err() != nil {
		return nil, nil
	}
	devicepush.WarnWithoutStore(s, Name)
	return New(cfg, key, notifiers, s.Devices, Options{Logger: s.Logger, Clock: s.Clock})
}
