package fcm

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/internal/devicepush"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
)

// Name is the channel's name in config and in the ledger.
const Name = "fcm"

// Platform is the device platform the channel sends to: devices registered
// with POST /v1/devices as {"platform": "android", ...}.
const Platform = "android"

// Plugin registers the FCM channel: per-recipient, to every Android device
// the recipient registered. A recipient without one gets an `unavailable`
// delivery at fan-out time ("recipient has no android devices").
var Plugin = channels.Plugin{
	Name:         Name,
	PerRecipient: true,
	Device:       &channels.DevicePlatform{Platform: Platform, CheckToken: CheckToken, CheckApp: CheckApp},
	DefaultMode:  notifytype.ModeImmediate,
	Open:         open,
}

// The service's public endpoints, the defaults of channels.fcm.base_url and
// channels.fcm.token_url (the latter when the key file names no token_uri).
const (
	DefaultBaseURL  = "https://fcm.googleapis.com"
	DefaultTokenURL = "https://oauth2.googleapis.com/token"
)

// DefaultTimeout bounds one request when channels.fcm.timeout is not set.
const DefaultTimeout = 10 * time.Second

// Config is the channels.fcm section. Without it FCM deliveries are
// `unavailable`.
type Config struct {
	// ProjectID is the Firebase project messages are sent through; default
	// the service account's project_id.
	ProjectID string `yaml:"project_id"`
	// ServiceAccountFile is the service account's JSON key file (Firebase
	// console, Project settings, Service accounts), read from the daemon's
	// working directory. Its private_key signs the OAuth 2.0 assertion.
	ServiceAccountFile string `yaml:"service_account_file"`
	// BaseURL is where the FCM HTTP v1 API is; default DefaultBaseURL.
	BaseURL string `yaml:"base_url"`
	// TokenURL is where the assertion is exchanged for an access token;
	// default the key file's token_uri, or DefaultTokenURL.
	TokenURL string `yaml:"token_url"`
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

// Templates is a notifier's fcm section: text/templates over the params.
// Title is required; url, when it renders, goes in the message's data for
// the app to open.
type Templates struct {
	Title string `yaml:"title"`
	Body  string `yaml:"body"`
	URL   string `yaml:"url"`

	parsed devicepush.Templates
}

var (
	// tokenRE: FCM registration tokens are URL-safe text ("<instance>:APA91b…",
	// about 150 to 200 bytes today); the bound leaves room for growth.
	tokenRE = regexp.MustCompile(`^[A-Za-z0-9_:\-]+$`)
	// packageRE: an Android application id, two or more dotted segments,
	// each starting with a letter.
	packageRE   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+$`)
	projectIDRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.:-]{1,99}$`)
)

// maxToken is the longest registration token a device may have.
const maxToken = 1024

// CheckToken returns why token cannot be an FCM registration token: 20 to
// 1024 letters, digits, '_', ':' and '-'.
func CheckToken(token string) error {
	if len(token) < 20 || len(token) > maxToken || !tokenRE.MatchString(token) {
		return errors.New("want an FCM registration token: 20 to 1024 letters, digits, '_', ':' or '-'")
	}
	return nil
}

// CheckApp returns why app cannot be an Android application id (package
// name): "com.example.app", at most 255 bytes.
func CheckApp(app string) error {
	if len(app) > 255 || !packageRE.MatchString(app) {
		return fmt.Errorf("want an Android package name such as com.example.app, got %q", app)
	}
	return nil
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
	var acct *ServiceAccount
	if cfg.ServiceAccountFile == "" {
		p.Add(sec, "service_account_file", "must be set (the service account's JSON key file)")
	} else {
		var err error
		if acct, err = LoadServiceAccount(cfg.ServiceAccountFile); err != nil {
			p.Add(sec, "service_account_file", "%v", err)
		}
	}
	if cfg.ProjectID == "" && acct != nil {
		cfg.ProjectID = acct.ProjectID
	}
	switch {
	case cfg.ProjectID == "" && acct != nil:
		p.Add(sec, "project_id", "must be set (the key file names no project_id)")
	case cfg.ProjectID != "" && !projectIDRE.MatchString(cfg.ProjectID):
		p.Add(sec, "project_id", "want a Firebase project id (lower-case letters, digits and '-'), got %q", cfg.ProjectID)
	}
	if cfg.TokenURL != "" {
		p.HTTPURL(sec, "token_url", cfg.TokenURL)
	}
	devicepush.CheckConnection(p, sec, cfg.BaseURL, cfg.CAFile, cfg.Timeout)
	if p.Err() != nil {
		return nil, nil
	}
	devicepush.WarnWithoutStore(s, Name)
	return New(cfg, acct, notifiers, s.Devices, Options{Logger: s.Logger, Clock: s.Clock})
}
