package channels

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/templates"
)

// Plugin is a channel as the registry knows it: what the channel is, and how
// to build it from the config. Built-in channels and your own register the
// same way, as a Plugin passed to NewRegistry (server.Options.Channels for an
// embedded daemon). Everything that lists channels — the fan-out, preference
// rules and their validation, the effective-preferences matrix, the ledger,
// the API document and the preference center — iterates the registry.
type Plugin struct {
	// Name is the channel's name in config (channels.<name>,
	// notifiers.<n>.channels.<name>), in preference rules and in the ledger.
	// Lower-case letters, digits and _; unique in a registry.
	Name string
	// PerRecipient channels send one message per recipient; the value Open
	// returns implements Channel. A recipient's preferences choose the mode.
	PerRecipient bool
	// Bulk channels send one message for a notification's whole audience
	// (a Slack channel, a notifier-level webhook); the value Open returns
	// implements BulkChannel. A channel may be both (the webhook is).
	Bulk bool
	// Inbox marks the in-app inbox: its items are written inside the fan-out
	// transaction, exactly once, and the value Open returns implements
	// InboxChannel. At most one registered channel is the inbox.
	Inbox bool
	// Address is what a per-recipient delivery needs: a profile field
	// ("email", "webhook_url", "phone", "name", "locale" or "timezone") or
	// a registration (PushSubscriptionAddress for browser push
	// subscriptions; DeviceAddress(platform) for mobile devices, which
	// Device sets). A recipient without it gets an `unavailable` delivery
	// at fan-out time (MissingAddress: "recipient has no <address>") and
	// the channel is not asked. "" means the channel needs no address.
	Address string
	// Device, for a channel that sends to the recipients' registered
	// mobile devices, names their platform and how a device of it is
	// checked before it is stored. It sets Address to
	// DeviceAddress(Device.Platform). Nil for any other channel.
	Device *DevicePlatform
	// Digest says the channel can roll deliveries up into a digest (mode
	// digest); the value Open returns implements DigestChannel. A digest
	// preference on any other channel reads as immediate. At most one
	// registered channel digests: a recipient's digest rows become one
	// message.
	Digest bool
	// DefaultMode is the notifier's mode on the channel when its section sets
	// no `default`. Zero means immediate.
	DefaultMode notifytype.Mode
	// Open builds the channel from the config. It decodes and checks the
	// channel's section (setup.Section, empty when channels.<name> is absent)
	// and each notifier's section (setup.Notifiers), reporting every problem
	// through setup.Problems, and returns the channel. It returns nil (and no
	// error) when the channel is not configured: its deliveries are then
	// `unavailable`. Open must not do network I/O: `notifyd check` opens
	// every channel. An error is for failures that are not about the file.
	Open func(setup *Setup) (any, error)
}

// Setup is what a Plugin's Open gets.
type Setup struct {
	// Config is the whole loaded config (digest settings, retry, ...).
	Config *config.Config
	// Section is channels.<name>, empty when the file has none.
	Section *config.Section
	// Notifiers are the notifiers that use the channel, by name, with their
	// sections for it (notifiers.<n>.channels.<name>).
	Notifiers map[string]*config.NotifierChannel
	// Problems collects what is wrong with the sections, with file and line.
	Problems *config.Problems
	// Logger is the daemon's logger (never nil).
	Logger *slog.Logger
	// Clock returns the current time (never nil); tests inject one.
	Clock func() time.Time
	// Checking is true when the file is only being checked (`notifyd check`,
	// server.LoadConfig), not opened to run: a value that is normally
	// taken from the environment, such as a secret, may be missing then
	// without being a problem; the daemon refuses to start without it.
	Checking bool
	// PushSubscriptions is the store of browser push subscriptions, given
	// by the daemon (WithPushSubscriptions); nil when checking, or when the
	// program opening the registry provides none.
	PushSubscriptions PushSubscriptions
	// Devices is the store of registered mobile devices, given by the
	// daemon (WithDevices); nil when checking, or when the program opening
	// the registry provides none.
	Devices Devices
}

// NotifierNames returns the names of the notifiers that use the channel, sorted.
func (s *Setup) NotifierNames() []string { return slices.Sorted(maps.Keys(s.Notifiers)) }

// NotifierSection is one notifier's section for a channel, as
// DecodeNotifiers hands it to the channel.
type NotifierSection struct {
	// Name is the notifier's name.
	Name string
	// Section is notifiers.<Name>.channels.<channel>, without `default`.
	Section *config.Section
	// Example is what `notifyd check` renders the notifier's templates with
	// (its example params, as templates see them).
	Example map[string]any
}

// DecodeNotifiers decodes every notifier's section for the channel into a
// new T (its defaults first, see config.Defaulter), in name order, calls
// check with each one that decoded (to parse and test-render its templates
// and report problems through s.Problems), and returns them by notifier
// name. A section that did not decode is reported and left out.
func DecodeNotifiers[T any](s *Setup, check func(n NotifierSection, t *T)) map[string]*T {
	out := make(map[string]*T, len(s.Notifiers))
	for _, name := range s.NotifierNames() {
		sec := s.Notifiers[name].Section
		t := new(T)
		if !s.Problems.Decode(sec, t) {
			continue
		}
		if check != nil {
			check(NotifierSection{Name: name, Section: sec,
				Example: templates.Params(s.Config.Notifiers[name].ExampleParams())}, t)
		}
		out[name] = t
	}
	return out
}

var (
	nameRE     = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	platformRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)
)

// addresses are the profile fields and registrations a Plugin's Address
// may name (besides DeviceAddress, which Device sets): the ones the fan-out
// reads with each recipient.
var addresses = []string{"", "email", "webhook_url", "phone", "name", "locale", "timezone", PushSubscriptionAddress}

// Registry is the set of channels a daemon knows, in registration order (the
// order the API and the preference center list them in).
type Registry struct {
	plugins []Plugin
	byName  map[string]int
}

// NewRegistry registers plugins. A name registered twice, an invalid name, a
// plugin that is neither per-recipient nor bulk, a second inbox or a missing
// Open is an error.
func NewRegistry(plugins ...Plugin) (*Registry, error) {
	r := &Registry{byName: map[string]int{}}
	inbox, digest := "", ""
	platforms := map[string]string{}
	for _, p := range plugins {
		if p.Device != nil {
			if err := checkDevicePlatform(p, platforms); err != nil {
				return nil, err
			}
			p.Address = DeviceAddress(p.Device.Platform)
		}
		switch {
		case p.Device == nil && !slices.Contains(addresses, p.Address):
			return nil, fmt.Errorf("channel %s: address %q: want one of %q", p.Name, p.Address, addresses)
		case p.Digest && digest != "":
			return nil, fmt.Errorf("channel %s: %s digests already (at most one channel can)", p.Name, digest)
		case !nameRE.MatchString(p.Name):
			return nil, fmt.Errorf("channel name %q: want lower-case letters, digits and _, starting with a letter", p.Name)
		case p.Open == nil:
			return nil, fmt.Errorf("channel %s: Open is nil", p.Name)
		case !p.PerRecipient && !p.Bulk:
			return nil, fmt.Errorf("channel %s: neither per-recipient nor bulk", p.Name)
		case p.Inbox && !p.PerRecipient:
			return nil, fmt.Errorf("channel %s: the inbox is a per-recipient channel", p.Name)
		case p.Inbox && inbox != "":
			return nil, fmt.Errorf("channel %s: %s is the inbox already", p.Name, inbox)
		}
		if _, dup := r.byName[p.Name]; dup {
			return nil, fmt.Errorf("channel %s is registered twice", p.Name)
		}
		if p.Inbox {
			inbox = p.Name
		}
		if p.Digest {
			digest = p.Name
		}
		if p.DefaultMode == "" {
			p.DefaultMode = notifytype.ModeImmediate
		}
		r.byName[p.Name] = len(r.plugins)
		r.plugins = append(r.plugins, p)
	}
	return r, nil
}

// checkDevicePlatform checks the Device of p, a plugin that sends to
// mobile devices, against the platforms registered before it (platform ->
// channel), and adds its own.
func checkDevicePlatform(p Plugin, platforms map[string]string) error {
	d := p.Device
	switch {
	case !p.PerRecipient:
		return fmt.Errorf("channel %s: a device channel is per-recipient", p.Name)
	case p.Address != "" && p.Address != DeviceAddress(d.Platform):
		return fmt.Errorf("channel %s: address %q: a device channel's address is its platform's (%s)", p.Name, p.Address,
			DeviceAddress(d.Platform))
	case !platformRE.MatchString(d.Platform):
		return fmt.Errorf("channel %s: device platform %q: want lower-case letters, digits and _ (at most 32)", p.Name, d.Platform)
	case d.CheckToken == nil || d.CheckApp == nil:
		return fmt.Errorf("channel %s: device platform %s: CheckToken and CheckApp are required", p.Name, d.Platform)
	case platforms[d.Platform] != "":
		return fmt.Errorf("channel %s: %s sends to %s devices already (one channel per platform)", p.Name,
			platforms[d.Platform], d.Platform)
	}
	platforms[d.Platform] = p.Name
	return nil
}

// Platforms returns the device platforms the registered channels send to
// (their Device), in registration order: what POST /v1/devices accepts.
func (r *Registry) Platforms() []string {
	var out []string
	for _, p := range r.plugins {
		if p.Device != nil {
			out = append(out, p.Device.Platform)
		}
	}
	return out
}

// DevicePlatform returns the Device of the registered channel that sends to
// platform's devices, and whether there is one.
func (r *Registry) DevicePlatform(platform string) (*DevicePlatform, bool) {
	for _, p := range r.plugins {
		if p.Device != nil && p.Device.Platform == platform {
			return p.Device, true
		}
	}
	return nil, false
}

// Plugins returns the registered channels in registration order.
func (r *Registry) Plugins() []Plugin { return slices.Clone(r.plugins) }

// Lookup returns the channel named name.
func (r *Registry) Lookup(name string) (Plugin, bool) {
	i, ok := r.byName[name]
	if !ok {
		return Plugin{}, false
	}
	return r.plugins[i], true
}

// Names returns every registered channel's name, in registration order.
func (r *Registry) Names() []string {
	names := make([]string, len(r.plugins))
	for i, p := range r.plugins {
		names[i] = p.Name
	}
	return names
}

// PerRecipient returns the names of the per-recipient channels, the ones a
// recipient's preferences decide, in registration order.
func (r *Registry) PerRecipient() []string {
	var names []string
	for _, p := range r.plugins {
		if p.PerRecipient {
			names = append(names, p.Name)
		}
	}
	return names
}

// Digest returns the name of the channel that digests, "" when none is
// registered.
func (r *Registry) Digest() string {
	for _, p := range r.plugins {
		if p.Digest {
			return p.Name
		}
	}
	return ""
}

// Inbox returns the name of the inbox channel, "" when none is registered.
func (r *Registry) Inbox() string {
	for _, p := range r.plugins {
		if p.Inbox {
			return p.Name
		}
	}
	return ""
}

// Modes returns the modes a notifier may set as a channel's `default`:
// immediate and off, and digest on a channel that can digest.
func (p Plugin) Modes() []notifytype.Mode {
	if p.Digest {
		return []notifytype.Mode{notifytype.ModeImmediate, notifytype.ModeDigest, notifytype.ModeOff}
	}
	return []notifytype.Mode{notifytype.ModeImmediate, notifytype.ModeOff}
}

// Set is a registry's channels opened on one config: what the fan-out and
// the send jobs deliver through. A channel missing from its maps is not
// configured, and its deliveries are `unavailable`.
type Set struct {
	// Registry is the registry the set was opened from.
	Registry *Registry
	// Channels are the configured per-recipient channels by name.
	Channels map[string]Channel
	// Bulk are the configured bulk channels by name.
	Bulk map[string]BulkChannel
	// Digests are the configured channels that can send digests, by name
	// (at most one).
	Digests map[string]DigestChannel
	// Inbox renders in-app items; nil when no inbox channel is registered.
	Inbox InboxChannel

	opened  map[string]any // every configured channel by name, as Open returned it
	closers []io.Closer
}

// Opened returns the configured channel named name as its Plugin's Open
// returned it (for optional interfaces such as Previewer), and whether it is
// configured.
func (s *Set) Opened(name string) (any, bool) {
	v, ok := s.opened[name]
	return v, ok
}

// Open checks the config's channel sections against the registry and opens
// every registered channel. A section for a channel that is not registered,
// a notifier `default` the channel does not allow, and every problem a
// channel reports are returned together as a *config.Errors, each with its
// file and line. Close releases what the channels hold. opts give the
// channels what the daemon provides (WithPushSubscriptions).
func (r *Registry) Open(cfg *config.Config, logger *slog.Logger, clock func() time.Time, opts ...OpenOption) (*Set, error) {
	problems := cfg.NewProblems()
	s, errs := r.open(cfg, problems, logger, clock, false, opts...)
	if err := problems.Err(); err != nil {
		errs = append([]error{err}, errs...)
	}
	if len(errs) > 0 {
		s.Close()
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// OpenToCheck is Open as `notifyd check` sees the file (Setup.Checking):
// for tools that render without sending, such as `notifyd preview`, which
// must work while a secret is still left to the environment.
func (r *Registry) OpenToCheck(cfg *config.Config) (*Set, error) {
	problems := cfg.NewProblems()
	s, errs := r.open(cfg, problems, nil, nil, true)
	if err := problems.Err(); err != nil {
		errs = append([]error{err}, errs...)
	}
	if len(errs) > 0 {
		s.Close()
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// Check opens every channel on cfg and closes them again, reporting every
// problem through p: what config.LoadWith calls so that `notifyd check`
// lists the channels' problems in line order with the rest of the file's.
func (r *Registry) Check(cfg *config.Config, p *config.Problems) {
	s, errs := r.open(cfg, p, nil, nil, true)
	_ = s.Close()
	for _, err := range errs {
		p.Add(nil, "", "%v", err)
	}
}

// CheckToRun is Check with the rules of Open, which the daemon runs with:
// a value a channel normally takes from the environment, such as a secret,
// must be set (Setup.Checking is false). It is what `notifyd check` runs, so
// that it refuses exactly what `notifyd run` would.
func (r *Registry) CheckToRun(cfg *config.Config, p *config.Problems) {
	s, errs := r.open(cfg, p, nil, nil, false)
	_ = s.Close()
	for _, err := range errs {
		p.Add(nil, "", "%v", err)
	}
}

func (r *Registry) open(cfg *config.Config, problems *config.Problems, logger *slog.Logger, clock func() time.Time,
	checking bool, opts ...OpenOption,
) (*Set, []error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if clock == nil {
		clock = time.Now
	}
	known := strings.Join(r.Names(), ", ")
	for _, name := range slices.Sorted(maps.Keys(cfg.Channels)) {
		if _, ok := r.byName[name]; !ok {
			problems.Add(cfg.Channels[name], "", "unknown channel %q (registered: %s)", name, known)
		}
	}
	perChannel := map[string]map[string]*config.NotifierChannel{}
	for _, nname := range cfg.NotifierNames() {
		nf := cfg.Notifiers[nname]
		for _, cname := range slices.Sorted(maps.Keys(nf.Channels)) {
			nc := nf.Channels[cname]
			p, ok := r.Lookup(cname)
			if !ok {
				problems.Add(nc.Section, "", "unknown channel %q (registered: %s)", cname, known)
				continue
			}
			if nc.Default != "" {
				modes := make([]string, 0, 3)
				for _, m := range p.Modes() {
					modes = append(modes, string(m))
				}
				problems.Mode(nc.Section, "default", nc.Default, modes...)
			}
			r.checkWorkflow(nf, p, nc, problems)
			if perChannel[cname] == nil {
				perChannel[cname] = map[string]*config.NotifierChannel{}
			}
			perChannel[cname][nname] = nc
		}
	}
	s := &Set{Registry: r, Channels: map[string]Channel{}, Bulk: map[string]BulkChannel{},
		Digests: map[string]DigestChannel{}, opened: map[string]any{}}
	var errs []error
	for _, p := range r.plugins {
		sec := cfg.Channels[p.Name]
		if sec == nil {
			sec = emptySection(p.Name)
		}
		setup := &Setup{Config: cfg, Section: sec, Notifiers: perChannel[p.Name], Problems: problems,
			Logger: logger.With("channel", p.Name), Clock: clock, Checking: checking}
		for _, o := range opts {
			o(setup)
		}
		v, err := p.Open(setup)
		if err != nil {
			errs = append(errs, fmt.Errorf("channels.%s: %w", p.Name, err))
			continue
		}
		if v == nil {
			continue
		}
		s.opened[p.Name] = v
		if c, ok := v.(io.Closer); ok {
			s.closers = append(s.closers, c)
		}
		if err := s.add(p, v); err != nil {
			errs = append(errs, err)
		}
	}
	return s, errs
}

// add files an opened channel under what its plugin declares.
func (s *Set) add(p Plugin, v any) (err error) {
	if p.PerRecipient {
		err = errors.Join(err, file(p, v, "per-recipient", s.Channels))
	}
	if p.Bulk {
		err = errors.Join(err, file(p, v, "bulk", s.Bulk))
	}
	if p.Digest {
		err = errors.Join(err, file(p, v, "a digest channel", s.Digests))
	}
	if p.Inbox {
		inbox := map[string]InboxChannel{}
		err = errors.Join(err, file(p, v, "the inbox", inbox))
		s.Inbox = inbox[p.Name]
	}
	return err
}

// file adds v to m under p's name, or says which interface it lacks.
func file[T any](p Plugin, v any, what string, m map[string]T) error {
	t, ok := v.(T)
	if !ok {
		return fmt.Errorf("channel %s is %s but %T does not implement %s", p.Name, what, v, reflect.TypeFor[T]())
	}
	m[p.Name] = t
	return nil
}

// Close closes every opened channel that holds resources (pooled SMTP
// connections), and returns the first error.
func (s *Set) Close() error {
	var first error
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i].Close(); err != nil && first == nil {
			first = err
		}
	}
	s.closers = nil
	return first
}

func emptySection(name string) *config.Section {
	sec, _ := config.NewSection("channels."+name, "")
	return sec
}
