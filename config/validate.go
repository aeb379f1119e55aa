package config

import (
	"fmt"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/templates"
	htmltemplate "html/template"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"time"
	"unicode"

	"github.com/robfig/cron/v3"
)

var (
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
	// channelNameRE is what a channel name may be: it appears in URLs, in
	// preference rules and in the ledger.
	channelNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
)

// validate checks every value, fills in defaults that depend on other values,
// and compiles schemas, templates, cron specs and zones. Problems go to el.
func (c *Config) validate(el *errorList) {
	if !identRE.MatchString(c.Database.Schema) {
		el.add("database.schema", "invalid schema name %q (want a SQL identifier: letters, digits and _, at most 63)", c.Database.Schema)
	}
	atLeast(el, "database.max_conns", c.Database.MaxConns, 0)
	positive(el, "database.max_read_lag", c.Database.MaxReadLag)
	if c.Database.ReadURL != "" && c.Database.ReadURL == c.Database.URL {
		el.add("database.read_url", "is database.url: name a standby of it, or leave it empty")
	}

	if _, _, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
		el.add("http.listen", "invalid listen address %q (want host:port, such as 127.0.0.1:8080 or :8080)", c.HTTP.Listen)
	}
	for i, o := range c.HTTP.AllowedOrigins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			el.add(fmt.Sprintf("http.allowed_origins[%d]", i), "invalid origin %q (want scheme://host[:port], such as https://app.example.test, or *)", o)
		}
	}
	c.validateTokens(el)
	if c.HTTP.MaxBody < 1 {
		el.add("http.max_body", "must be at least 1, got %d", c.HTTP.MaxBody)
	}
	positive(el, "http.read_header_timeout", c.HTTP.ReadHeaderTimeout)
	positive(el, "http.read_timeout", c.HTTP.ReadTimeout)
	positive(el, "http.write_timeout", c.HTTP.WriteTimeout)
	positive(el, "http.idle_timeout", c.HTTP.IdleTimeout)
	atLeast(el, "http.max_header_bytes", c.HTTP.MaxHeaderBytes, 1024)
	atLeast(el, "http.max_connections", c.HTTP.MaxConnections, 1)
	atLeast(el, "http.max_streams_per_recipient", c.HTTP.MaxStreamsPerRecipient, 1)
	atLeast(el, "http.max_topics", c.HTTP.MaxTopics, 1)
	positive(el, "http.max_token_ttl", c.HTTP.MaxTokenTTL)
	if c.HTTP.Rate.Recipient < 0 {
		el.add("http.rate.recipient", "must not be negative (0 is unlimited), got %g", c.HTTP.Rate.Recipient)
	}
	if c.HTTP.Rate.Admin < 0 {
		el.add("http.rate.admin", "must not be negative (0 is unlimited), got %g", c.HTTP.Rate.Admin)
	}
	atLeast(el, "http.rate.recipient_burst", c.HTTP.Rate.RecipientBurst, 1)
	atLeast(el, "http.rate.admin_burst", c.HTTP.Rate.AdminBurst, 1)
	atLeast(el, "http.rate.tenant_key_burst", c.HTTP.Rate.TenantKeyBurst, 1)

	q := c.Queues
	atLeast(el, "queues.fanout", q.Fanout, 1)
	atLeast(el, "queues.send", q.Send, 1)
	atLeast(el, "queues.digest", q.Digest, 1)
	atLeast(el, "queues.maintenance", q.Maintenance, 1)
	atLeast(el, "queues.fanout_chunk", q.FanoutChunk, 1)
	atLeast(el, "queues.send_batch", q.SendBatch, 1)
	atLeast(el, "queues.send_per_host", q.SendPerHost, 1)
	// River refuses intervals under 1ms and a poll interval shorter than the cooldown.
	if q.FetchCooldown.D() < time.Millisecond {
		el.add("queues.fetch_cooldown", "must be at least 1ms, got %s", q.FetchCooldown)
	}
	if q.FetchPollInterval.D() < time.Millisecond {
		el.add("queues.fetch_poll_interval", "must be at least 1ms, got %s", q.FetchPollInterval)
	} else if q.FetchPollInterval < q.FetchCooldown {
		el.add("queues.fetch_poll_interval", "must not be shorter than queues.fetch_cooldown (%s), got %s", q.FetchCooldown, q.FetchPollInterval)
	}

	c.validateReasons(el)
	c.validateChannels(el)
	c.loadCatalog(el)

	positive(el, "retry.max_age", c.Retry.MaxAge)
	positive(el, "retry.lease", c.Retry.Lease)
	c.Retry.SweepCron = cronSpec(el, "retry.sweep", c.Retry.Sweep, true)

	c.validateDigest(el)

	c.validateProviders(el)
	c.validateOIDC(el)

	positive(el, "retention.inbox", c.Retention.Inbox)
	positive(el, "retention.deliveries", c.Retention.Deliveries)
	positive(el, "retention.changes", c.Retention.Changes)
	c.Retention.ScheduleCron = cronSpec(el, "retention.schedule", c.Retention.Schedule, true)

	for _, name := range c.NotifierNames() {
		n := c.Notifiers[name]
		n.Name = name
		n.validate(el, join("notifiers", name))
	}
}

func (c *Config) validateReasons(el *errorList) {
	if len(c.Reasons) == 0 {
		el.add("reasons", "must list at least one reason")
	}
	seen := map[string]int{}
	for i, r := range c.Reasons {
		p := fmt.Sprintf("reasons[%d]", i)
		switch first, dup := seen[r]; {
		case r == "":
			el.add(p, "must not be empty")
		case strings.IndexFunc(r, unicode.IsSpace) >= 0:
			el.add(p, "invalid reason %q (no spaces)", r)
		case dup:
			el.add(p, "duplicate reason %q (also reasons[%d])", r, first)
		default:
			seen[r] = i
		}
	}
}

func (c *Config) validateChannels(el *errorList) {
	for _, name := range sortedKeys(c.Channels) {
		if !channelNameRE.MatchString(name) {
			el.add(join("channels", name), "invalid channel name %q (want lower-case letters, digits and _)", name)
		}
	}
}

func (c *Config) validateDigest(el *errorList) {
	d := &c.Digest
	if strings.HasPrefix(d.Schedule, "CRON_TZ=") || strings.HasPrefix(d.Schedule, "TZ=") {
		el.add("digest.schedule", "must not name a time zone: it runs in each recipient's zone (digest.timezone by default)")
	} else {
		d.ScheduleCron = cronSpec(el, "digest.schedule", d.Schedule, false)
	}
	d.SweepCron = cronSpec(el, "digest.sweep", d.Sweep, true)
	if loc, err := time.LoadLocation(d.Timezone); err != nil || d.Timezone == "" {
		el.add("digest.timezone", "unknown time zone %q (want an IANA name such as UTC or Europe/Paris)", d.Timezone)
	} else {
		d.Location = loc
	}
	atLeast(el, "digest.max_items", d.MaxItems, 1)
	if d.Subject == "" {
		el.add("digest.subject", "must not be empty")
	}
	if d.Text == "" && d.HTML == "" {
		el.add("digest.text", "digest.text or digest.html must be set")
	}
	d.SubjectTmpl = c.recipientTextTmpl(el, "digest.subject", d.Subject)
	d.TextTmpl = c.recipientTextTmpl(el, "digest.text", d.Text)
	d.HTMLTmpl = c.htmlTmpl(el, "digest.html", d.HTML)

	data := exampleDigest()
	data.Locale = c.ExampleLocale()
	renderCheck(el, "digest.subject", d.SubjectTmpl, data)
	renderCheck(el, "digest.text", d.TextTmpl, data)
	renderHTMLCheck(el, "digest.html", d.HTMLTmpl, data)
}

// exampleDigest is what `notifyd check` renders the digest templates with.
func exampleDigest() templates.DigestData {
	return templates.DigestData{
		Recipient: map[string]any{
			"ID": "example", "Email": "someone@example.test", "Name": "Example", "Locale": "en",
			"Timezone": "UTC", "Data": map[string]any{},
		},
		Items: []templates.DigestItem{{
			Notifier: "example.notifier", Key: "example-1", Category: "example", Reason: "subscribed",
			Title: "Example title", Body: "Example body", URL: "https://app.example.test/1",
			Params: map[string]any{}, CreatedAt: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC),
		}},
		Count: 2,
		More:  1,
	}
}

func (n *Notifier) validate(el *errorList, path string) {
	switch {
	case n.Name == "":
		el.add(path, "a notifier name must not be empty")
	case len(n.Name) > 255:
		el.add(path, "a notifier name must be at most 255 bytes")
	case strings.ContainsFunc(n.Name, func(r rune) bool { return r == '/' || unicode.IsSpace(r) || unicode.IsControl(r) }):
		el.add(path, "invalid notifier name %q (no /, spaces or control characters: it appears in URLs)", n.Name)
	}
	if n.MaxRecipients < 1 {
		el.add(join(path, "max_recipients"), "must be at least 1, got %d", n.MaxRecipients)
	}

	example := map[string]any{}
	if n.Params != nil {
		n.Schema = compileSchema(el, join(path, "params"), n.Name, n.Params)
		if n.Schema != nil {
			checkPatterns(el, join(path, "params"), n.Params)
		}
		if props, _ := n.Params["properties"].(map[string]any); props != nil {
			if _, ok := props[notifytype.TenantKey]; ok {
				el.add(join(join(join(path, "params"), "properties"), notifytype.TenantKey),
					"templates see the notification's tenant as .%s: give this param another name", notifytype.TenantKey)
			}
		}
		if n.Example == nil {
			example = exampleParams(n.Params)
		}
	}
	if n.Example != nil {
		example = n.Example
		if err := n.ValidateParams(n.Example); err != nil {
			el.add(join(path, "example"), "does not match params: %s", strings.TrimPrefix(err.Error(), "invalid params: "))
		}
	}

	n.example = example
	n.validateBatch(el, path)
	n.validateAudience(el, path)
	for _, nc := range n.Channels {
		if nc != nil && nc.Section != nil {
			nc.Section.notifier = n
		}
	}
	n.validateConditions(el, path)
	for _, name := range sortedKeys(n.Channels) {
		if !channelNameRE.MatchString(name) {
			el.add(join(join(path, "channels"), name), "invalid channel name %q (want lower-case letters, digits and _)", name)
		}
	}
}

func textTmpl(el *errorList, path, src string) *template.Template {
	t, err := templates.ParseText(path, src)
	if err != nil {
		el.add(path, "invalid template: %v", err)
	}
	return t
}

// recipientTextTmpl is textTmpl for a template that may call recipient
// (templates.ParseRecipientText).
func recipientTextTmpl(el *errorList, path, src string) *template.Template {
	t, err := templates.ParseRecipientText(path, src)
	if err != nil {
		el.add(path, "invalid template: %v", err)
	}
	return t
}

func htmlTmpl(el *errorList, path, src string) *htmltemplate.Template {
	t, err := templates.ParseHTML(path, src)
	if err != nil {
		el.add(path, "invalid template: %v", err)
	}
	return t
}

func renderCheck(el *errorList, path string, t *template.Template, data any) {
	if t == nil {
		return
	}
	if err := t.Execute(discard{}, data); err != nil {
		el.add(path, "template does not render with the example params: %v", templates.CleanError(path, err))
	}
}

func renderHTMLCheck(el *errorList, path string, t *htmltemplate.Template, data any) {
	if t == nil {
		return
	}
	if err := t.Execute(discard{}, data); err != nil {
		el.add(path, "template does not render with the example params: %v", templates.CleanError(path, err))
	}
}

// checkFields reports the fields of t that n's params schema rules out, at
// path (the template's key), one problem per template.
func checkFields(el *errorList, path string, t templates.Executor, n *Notifier) {
	if n == nil {
		return
	}
	if bad := templates.CheckFields(t, n.Params, n.Batch != nil); len(bad) > 0 {
		el.add(path, "%s", strings.Join(bad, "; "))
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func mode(el *errorList, path, got string, want ...string) {
	for _, w := range want {
		if got == w {
			return
		}
	}
	el.add(path, "unknown mode %q (want %s)", got, oneOf(want))
}

func atLeast(el *errorList, path string, got, min int) {
	if got < min {
		el.add(path, "must be at least %d, got %d", min, got)
	}
}

func positive(el *errorList, path string, d Duration) {
	if d <= 0 {
		el.add(path, "must be a positive duration, got %s", d)
	}
}

// cronSpec parses a 5-field cron spec (or a descriptor such as @hourly or
// @every 10m) with robfig/cron's standard parser; withTZ allows a CRON_TZ=
// prefix.
func cronSpec(el *errorList, path, spec string, withTZ bool) cron.Schedule {
	if spec == "" {
		el.add(path, "must be set (a cron spec such as \"*/5 * * * *\")")
		return nil
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		hint := "5 fields: minute hour day-of-month month day-of-week"
		if withTZ {
			hint += ", optionally after CRON_TZ=<zone>"
		}
		el.add(path, "invalid cron spec %q: %v (want %s)", spec, err, hint)
		return nil
	}
	return s
}

func httpURL(el *errorList, path, s string) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		el.add(path, "invalid URL %q (want an absolute http or https URL)", s)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// MinSecretLength is the shortest http.admin_token and http.token_secret
// accepted: 32 bytes, the size of the HS256 key (RFC 7518 section 3.2) and
// enough that guessing is out of reach. `openssl rand -hex 32` makes one.
const MinSecretLength = 32

// validateTokens refuses short secrets and one secret used for both: a
// token_secret equal to the admin token would let anyone who holds the admin
// token mint recipient tokens, and anyone who can read a recipient token's
// key learn the admin token. An empty value is allowed: it disables that
// side of the API (a secret left to the environment reads as empty).
func (c *Config) validateTokens(el *errorList) {
	for _, kv := range []struct{ key, v string }{
		{"http.admin_token", c.HTTP.AdminToken},
		{"http.token_secret", c.HTTP.TokenSecret},
		{"http.bounce_token", c.HTTP.BounceToken},
	} {
		// The value is never quoted: it is a secret.
		if kv.v != "" && len(kv.v) < MinSecretLength {
			el.add(kv.key, "must be at least %d bytes, got %d (generate one with `openssl rand -hex 32`)", MinSecretLength, len(kv.v))
		}
	}
	if c.HTTP.AdminToken != "" && c.HTTP.AdminToken == c.HTTP.TokenSecret {
		el.add("http.token_secret", "must differ from http.admin_token")
	}
	// A bounce token equal to another secret would hand the relay that
	// secret's powers.
	if b := c.HTTP.BounceToken; b != "" && (b == c.HTTP.AdminToken || b == c.HTTP.TokenSecret) {
		el.add("http.bounce_token", "must differ from http.admin_token and http.token_secret")
	}
}

// validateProviders checks providers.<kind>: each provider named has the
// secrets its verification needs, and gets its default windows.
func (c *Config) validateProviders(el *errorList) {
	p := &c.Providers
	if v := p.SES; v != nil {
		if len(v.TopicARNs) == 0 {
			el.add("providers.ses.topic_arns", "must name at least one SNS topic ARN (arn:aws:sns:<region>:<account>:<topic>)")
		}
		for i, a := range v.TopicARNs {
			if !strings.HasPrefix(a, "arn:aws") || strings.Count(a, ":") != 5 {
				el.add(fmt.Sprintf("providers.ses.topic_arns[%d]", i), "want an SNS topic ARN (arn:aws:sns:<region>:<account>:<topic>), got %q", a)
			}
		}
		if v.MaxAge == 0 {
			v.MaxAge = Duration(time.Hour)
		}
		positive(el, "providers.ses.max_age", v.MaxAge)
	}
	if v := p.SendGrid; v != nil {
		if v.PublicKey == "" {
			el.add("providers.sendgrid.public_key", "must be set (the Event Webhook's verification key)")
		}
		if v.MaxAge == 0 {
			v.MaxAge = Duration(10 * time.Minute)
		}
		positive(el, "providers.sendgrid.max_age", v.MaxAge)
	}
	if v := p.Postmark; v != nil {
		if v.Username == "" || v.Password == "" {
			el.add("providers.postmark", "needs username and password (the basic auth credentials in the webhook's URL)")
		}
	}
	if v := p.Mailgun; v != nil {
		if v.SigningKey == "" {
			el.add("providers.mailgun.signing_key", "must be set (the HTTP webhook signing key)")
		}
		if v.MaxAge == 0 {
			v.MaxAge = Duration(10 * time.Minute)
		}
		positive(el, "providers.mailgun.max_age", v.MaxAge)
	}
	if v := p.Twilio; v != nil {
		if v.AuthToken == "" {
			el.add("providers.twilio.auth_token", "must be set (the account's auth token)")
		}
		if v.URL != "" && !strings.HasPrefix(v.URL, "https://") && !strings.HasPrefix(v.URL, "http://") {
			el.add("providers.twilio.url", "want the callback's absolute URL, got %q", v.URL)
		}
	}
}

// validateOIDC refuses a console.oidc that cannot work: no issuer or client
// id, a redirect URL that is not https (except on a loopback host), a role
// map naming no role or without a claim to read, and sets the session
// defaults.
func (c *Config) validateOIDC(el *errorList) {
	o := c.Console.OIDC
	if o == nil {
		return
	}
	if u, err := url.Parse(o.Issuer); o.Issuer == "" || err != nil || u.Host == "" || (u.Scheme != "https" && !loopbackHost(u.Hostname())) {
		el.add("console.oidc.issuer", "must be the provider's https issuer URL (http only on a loopback host), got %q", o.Issuer)
	}
	if o.ClientID == "" {
		el.add("console.oidc.client_id", "must be set (the client registered with the provider)")
	}
	u, err := url.Parse(o.RedirectURL)
	switch {
	case o.RedirectURL == "" || err != nil || u.Host == "":
		el.add("console.oidc.redirect_url", "must be an absolute URL ending in /admin/sso/callback, got %q", o.RedirectURL)
	case u.Scheme != "https" && !(u.Scheme == "http" && loopbackHost(u.Hostname())):
		el.add("console.oidc.redirect_url", "must be https (http only on a loopback host), got %q", o.RedirectURL)
	case u.Path != "/admin/sso/callback":
		el.add("console.oidc.redirect_url", "must end in /admin/sso/callback, got path %q", u.Path)
	}
	if len(o.RoleMap) > 0 && o.RolesClaim == "" {
		el.add("console.oidc.roles_claim", "must be set when console.oidc.role_map is (the claim whose values it maps, such as groups)")
	}
	for _, k := range sortedKeys(o.RoleMap) {
		if v := o.RoleMap[k]; v != "viewer" && v != "operator" && v != "admin" {
			el.add("console.oidc.role_map."+k, "must be viewer, operator or admin, got %q", v)
		}
	}
	if o.SessionTTL == 0 {
		o.SessionTTL = Duration(12 * time.Hour)
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = Duration(time.Hour)
	}
	positive(el, "console.oidc.session_ttl", o.SessionTTL)
	positive(el, "console.oidc.idle_timeout", o.IdleTimeout)
}

// loopbackHost reports whether host is localhost or a loopback address.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
