package config

import (
	"time"
)

// Defaults, as documented on the Config fields and in config.example.yaml.
const (
	defaultSchema      = "public"
	defaultListen      = "127.0.0.1:8080"
	defaultMaxBody     = 1 << 20
	defaultDigestText  = "{{range .Items}}- {{.Title}}\n{{end}}{{if .More}}and {{.More}} more\n{{end}}"
	defaultDigestSubj  = "Your {{.Count}} new notifications"
	defaultMaxItems    = 50
	defaultMaxRecips   = 10000
	defaultRetrySweep  = "CRON_TZ=UTC * * * * *"
	defaultDigestSched = "0 8 * * *"
	defaultDigestSweep = "CRON_TZ=UTC */5 * * * *"
	defaultRetention   = "CRON_TZ=UTC 17 3 * * *"
)

// defaultReasons is the reason precedence, strongest first.
var defaultReasons = []string{"assigned", "author", "mentioned", "subscribed", "role-default"}

func (c *Config) setDefaults() {
	c.Database.Schema = defaultSchema
	c.DefaultLocale = "en"
	c.Database.MaxReadLag = Duration(time.Second)
	c.HTTP.Listen = defaultListen
	c.HTTP.MaxBody = defaultMaxBody
	c.HTTP.ReadHeaderTimeout = Duration(10 * time.Second)
	c.HTTP.ReadTimeout = Duration(30 * time.Second)
	c.HTTP.WriteTimeout = Duration(30 * time.Second)
	c.HTTP.IdleTimeout = Duration(120 * time.Second)
	c.HTTP.MaxHeaderBytes = 64 << 10
	c.HTTP.MaxConnections = 1024
	c.HTTP.MaxStreamsPerRecipient = 5
	c.HTTP.MaxTopics = 100
	c.HTTP.MaxTokenTTL = Duration(24 * time.Hour)
	c.HTTP.Rate = Rate{Recipient: 20, RecipientBurst: 40, Admin: 200, AdminBurst: 400, TenantKey: 50, TenantKeyBurst: 100}
	c.Queues = Queues{
		Fanout:            4,
		Send:              50,
		Digest:            128,
		Maintenance:       2,
		FetchCooldown:     Duration(5 * time.Millisecond),
		FetchPollInterval: Duration(50 * time.Millisecond),
		FanoutChunk:       2000,
		SendBatch:         50,
		SendPerHost:       8,
	}
	c.Reasons = append([]string(nil), defaultReasons...)
	c.Retry = Retry{MaxAge: Duration(72 * time.Hour), Lease: Duration(5 * time.Minute), Sweep: defaultRetrySweep}
	c.Digest = Digest{
		Schedule: defaultDigestSched,
		Sweep:    defaultDigestSweep,
		Timezone: "UTC",
		MaxItems: defaultMaxItems,
		Subject:  defaultDigestSubj,
		Text:     defaultDigestText,
	}
	c.Retention = Retention{
		Inbox:      Duration(2160 * time.Hour),
		Deliveries: Duration(720 * time.Hour),
		Changes:    Duration(168 * time.Hour),
		Schedule:   defaultRetention,
	}
}

func (n *Notifier) setDefaults() {
	n.MaxRecipients = defaultMaxRecips
	n.AudienceTimeout = Duration(defaultAudienceTimeout)
}

// defaultAudienceTimeout is an audience query's statement timeout.
const defaultAudienceTimeout = 30 * time.Second
