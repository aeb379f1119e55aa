package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/internal/wire"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/stores"
)

// CodeInvalidPreferences is the 422 of a PUT of preferences whose rules break
// a preference rule (bad scope, channel or mode; digest on a channel that
// cannot digest; a duplicate (scope, channel); too many rules). Each detail
// names the field ("rules[3].mode"). Nothing is written.
const CodeInvalidPreferences = "invalid_preferences"

// maxPreferenceRules bounds one recipient's rule set: the fan-out reads every
// applicable rule of every recipient of a chunk in one statement.
const maxPreferenceRules = 200

// preferencesRequest is the body of PUT /v1/preferences and PUT
// /v1/recipients/{id}/preferences. Each rule is decoded on its own so errors
// can name it ("rules[2].mode"). The effective map of a GET response is
// accepted and ignored, so a response can be edited and written back.
type preferencesRequest struct {
	Rules     *[]json.RawMessage `json:"rules"`
	Effective json.RawMessage    `json:"effective"`
	Channels  json.RawMessage    `json:"channels"`
}

// preferencesResponse is what GET and PUT of preferences answer.
type preferencesResponse struct {
	// Rules are the stored rules, least specific scope first.
	Rules []notifyd.Rule `json:"rules"`
	// Effective maps every configured notifier to what the rules and mutes
	// resolve to.
	Effective map[string]effectiveNotifier `json:"effective"`
	// Channels are the registered per-recipient channels, in the order a
	// preference page lists them, each with the modes a rule may choose.
	Channels []channelInfo `json:"channels"`
}

// channelInfo describes one per-recipient channel to a preference page.
type channelInfo struct {
	Name  string         `json:"name"`
	Modes []notifyd.Mode `json:"modes"`
}

// channelInfos lists reg's per-recipient channels.
func channelInfos(reg *channels.Registry) []channelInfo {
	var out []channelInfo
	for _, p := range reg.Plugins() {
		if p.PerRecipient {
			out = append(out, channelInfo{Name: p.Name, Modes: p.Modes()})
		}
	}
	return out
}

// effectiveNotifier is the resolved posture of one recipient for one
// notifier: what a preference page renders.
type effectiveNotifier struct {
	Category string `json:"category"`
	Required bool   `json:"required"`
	// Muted reports an active "notifier:<name>" mute. A required notifier
	// ignores it: its channels show what is actually sent. Topic mutes are
	// not reflected: they depend on the topics a notification is sent to.
	Muted bool `json:"muted"`
	// Channels has one entry per per-recipient channel the notifier uses
	// (in_app, email, webhook): immediate, digest or off.
	Channels map[string]notifyd.Mode `json:"channels"`
}

// forRecipient adapts a recipient endpoint to its admin twin under
// /v1/recipients/{id}/…: the id comes from the path instead of a token.
func (s *Server) forRecipient(h recipientFunc) http.Handler {
	return s.admin(func(w http.ResponseWriter, r *http.Request) error {
		id := r.PathValue("id")
		if err := checkPathText("id", id); err != nil {
			return err
		}
		return h(w, r, id)
	})
}

// forRecipientOrTenant is forRecipient that a tenant key may call too,
// confined to its tenant's rules (see tenantOrAdmin).
func (s *Server) forRecipientOrTenant(h recipientFunc) http.Handler {
	return s.tenantOrAdmin(func(w http.ResponseWriter, r *http.Request) error {
		id := r.PathValue("id")
		if err := checkPathText("id", id); err != nil {
			return err
		}
		return h(w, r, id)
	})
}

// getPreferences is GET /v1/preferences (and /v1/recipients/{id}/preferences).
// A recipient without rules or profile gets no rules and the defaults.
//
// ?tenant= (or a request confined to a tenant: a token's claim, a tenant
// key) resolves the effective map for that tenant's notifications (its
// default rules and the recipient's rules scoped to it) and lists only the
// recipient's rules scoped to it.
func (s *Server) getPreferences(w http.ResponseWriter, r *http.Request, recipient string) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	tenant, err := requestTenant(r, q)
	if err != nil {
		return err
	}
	resp, err := s.readPreferences(r, s.read(), recipient, tenant)
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// putPreferences is PUT /v1/preferences (and /v1/recipients/{id}/preferences):
// {"rules":[...]} replaces the whole rule set ([] clears it) and answers like
// GET. Every rule is checked before anything is written.
//
// A rule with "tenant" applies to that tenant's notifications only (the
// tenant must exist). With ?tenant=, or confined to a tenant (a token's
// claim, a tenant key), the request replaces only that tenant's scoped
// rules: a rule without "tenant" is taken as the tenant's, one naming
// another tenant is a 403, and the global rules are left as they are.
func (s *Server) putPreferences(w http.ResponseWriter, r *http.Request, recipient string) error {
	q, err := parseQuery(r)
	if err != nil {
		return err
	}
	tenant, err := requestTenant(r, q)
	if err != nil {
		return err
	}
	var req preferencesRequest
	if err := s.DecodeJSON(w, r, &req, false); err != nil {
		return err
	}
	rules, err := checkRules(s.reg, req.Rules)
	if err != nil {
		return err
	}
	var global []stores.PreferenceRule
	var scoped []stores.TenantRule
	var named []string
	for i, rule := range rules {
		if tenant != "" {
			if rule.Tenant != "" && rule.Tenant != tenant {
				return forbidden("rules[%d].tenant: this request writes only tenant %q's rules", i, tenant)
			}
			rule.Tenant = tenant
		}
		p := stores.PreferenceRule{Scope: rule.Scope, Channel: rule.Channel, Mode: string(rule.Mode)}
		if rule.Tenant == "" {
			global = append(global, p)
			continue
		}
		if err := notifyd.CheckTenantID(fmt.Sprintf("rules[%d].tenant", i), rule.Tenant); err != nil {
			return unprocessable(fmt.Sprintf("rules[%d].tenant", i), "%s", err.(*notifyd.InputError).Message)
		}
		scoped = append(scoped, stores.TenantRule{Tenant: rule.Tenant, PreferenceRule: p})
		named = append(named, rule.Tenant)
	}
	var resp *preferencesResponse
	err = pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		if len(named) > 0 {
			missing, err := stores.MissingTenants(r.Context(), tx, named)
			if err != nil {
				return err
			}
			if len(missing) > 0 {
				return unprocessable("rules", "unknown tenant %q (PUT /v1/tenants/{id} creates it); nothing was written", missing[0])
			}
		}
		if tenant == "" {
			if err := stores.ReplacePreferences(r.Context(), tx, recipient, global); err != nil {
				return err
			}
		} else if err := stores.LockRecipient(r.Context(), tx, recipient); err != nil {
			return err
		}
		if err := stores.ReplaceTenantPreferences(r.Context(), tx, recipient, tenant, scoped); err != nil {
			return err
		}
		var err error
		resp, err = s.readPreferences(r, tx, recipient, tenant)
		return err
	})
	if err != nil {
		return err
	}
	wire.WriteJSON(w, http.StatusOK, resp)
	return nil
}

// checkRules decodes and validates a rule set: each rule with
// notifyd.Rule.Validate, at most maxPreferenceRules, no two with the same
// (scope, channel). It reports every problem at once. Rules naming a notifier
// or category the config does not have are accepted: they match nothing, and
// a notifier removed from config never makes a stored rule set unwritable.
func checkRules(reg *channels.Registry, raw *[]json.RawMessage) ([]notifyd.Rule, error) {
	if raw == nil {
		return nil, fieldError("rules", `is required ("rules": [] clears every rule)`)
	}
	if len(*raw) > maxPreferenceRules {
		msg := fmt.Sprintf("%d rules; at most %d", len(*raw), maxPreferenceRules)
		return nil, &wire.Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalidPreferences, Message: "rules: " + msg,
			Details: []any{wire.FieldDetail{Field: "rules", Message: msg}}}
	}
	rules := make([]notifyd.Rule, len(*raw))
	var details []any
	seen := make(map[[3]string]int, len(*raw))
	for i, elem := range *raw {
		field := fmt.Sprintf("rules[%d]", i)
		elem = bytes.TrimSpace(elem)
		if len(elem) == 0 || elem[0] != '{' {
			return nil, fieldError(field, `want an object {"scope", "channel", "mode"}`)
		}
		if err := decodeStrict(field, elem, &rules[i]); err != nil {
			return nil, err
		}
		rule := rules[i]
		if err := reg.ValidateRule(rule); err != nil {
			details = append(details, wire.FieldDetail{Field: field + "." + ruleField(reg, rule), Message: err.Error()})
			continue
		}
		key := [3]string{rule.Scope, rule.Channel, rule.Tenant}
		if j, dup := seen[key]; dup {
			details = append(details, wire.FieldDetail{Field: field,
				Message: fmt.Sprintf("same scope, channel and tenant as rules[%d]; give each (scope, channel) once per tenant", j)})
			continue
		}
		seen[key] = i
	}
	if len(details) > 0 {
		first := details[0].(wire.FieldDetail)
		msg := first.Field + ": " + first.Message
		if len(details) > 1 {
			msg += fmt.Sprintf(" (and %d more problems)", len(details)-1)
		}
		return nil, &wire.Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalidPreferences,
			Message: msg + "; nothing was written", Details: details}
	}
	return rules, nil
}

// ruleField names the part of an invalid rule ValidateRule refused, by
// asking again with the later parts made valid: the scope is checked with a
// channel and mode that are always fine, then the channel with such a mode.
func ruleField(reg *channels.Registry, rule notifyd.Rule) string {
	if reg.ValidateRule(notifyd.Rule{Scope: rule.Scope, Channel: "*", Mode: notifyd.ModeOff}) != nil {
		return "scope"
	}
	if reg.ValidateRule(notifyd.Rule{Scope: rule.Scope, Channel: rule.Channel, Mode: notifyd.ModeOff}) != nil {
		return "channel"
	}
	return "mode"
}

// readPreferences reads recipient's rules and active mutes and resolves them
// for every configured notifier: for tenant's notifications, with its
// layers, when tenant is set. A request confined to a tenant reads no mutes. The rules listed are the recipient's global
// and tenant-scoped ones, or, for a tenant, only its scoped rules (what a
// PUT for the tenant replaces).
func (s *Server) readPreferences(r *http.Request, db stores.DB, recipient, tenant string) (*preferencesResponse, error) {
	stored, err := stores.ListPreferences(r.Context(), db, recipient)
	if err != nil {
		return nil, err
	}
	scoped, err := stores.ListTenantPreferences(r.Context(), db, recipient, tenant)
	if err != nil {
		return nil, err
	}
	var defaults []notifyd.Rule
	if tenant != "" {
		t, err := stores.GetTenant(r.Context(), db, tenant)
		if errors.Is(err, stores.ErrNotFound) {
			return nil, notFoundError("no tenant %q", tenant)
		}
		if err != nil {
			return nil, err
		}
		for _, p := range t.Preferences {
			defaults = append(defaults, notifyd.Rule{Scope: p.Scope, Channel: p.Channel, Mode: notifyd.Mode(p.Mode)})
		}
	}
	// Mutes are the recipient's own across every tenant: a request confined
	// to a tenant (a token's claim, a tenant key) can neither read nor change
	// them, so its effective map is resolved without them.
	var mutes []stores.Mute
	if len(confinedTenants(r)) == 0 {
		if mutes, err = stores.ListMutes(r.Context(), db, recipient); err != nil {
			return nil, err
		}
	}
	rules := make([]notifyd.Rule, 0, len(stored)+len(scoped))
	for _, p := range stored {
		rules = append(rules, notifyd.Rule{Scope: p.Scope, Channel: p.Channel, Mode: notifyd.Mode(p.Mode)})
	}
	for _, p := range scoped {
		rules = append(rules, notifyd.Rule{Scope: p.Scope, Channel: p.Channel, Mode: notifyd.Mode(p.Mode),
			Tenant: p.Tenant})
	}
	muted := make(map[string]bool, len(mutes))
	for _, m := range mutes {
		muted[m.Target] = true
	}
	shown, resolved := rules, rules
	if tenant != "" {
		// What a PUT for the tenant replaces: its scoped rules.
		shown = rules[len(stored):]
	}
	if tenant == "" {
		// Without a tenant, only the global rules apply.
		resolved = rules[:len(stored)]
	}
	return &preferencesResponse{Rules: shown, Effective: effective(s.cfg, s.reg, resolved, defaults, muted),
		Channels: channelInfos(s.reg)}, nil
}

// effective resolves rules for every notifier of cfg and every registered
// per-recipient channel it uses, with the registry's Resolve: the resolution
// the fan-out applies. mutedTargets holds the active mute targets.
func effective(cfg *config.Config, reg *channels.Registry, rules, defaults []notifyd.Rule,
	mutedTargets map[string]bool) map[string]effectiveNotifier {
	out := make(map[string]effectiveNotifier, len(cfg.Notifiers))
	for _, name := range cfg.NotifierNames() {
		nf, ok := cfg.Notifier(name)
		if !ok {
			continue
		}
		muted := mutedTargets["notifier:"+name]
		e := effectiveNotifier{Category: nf.Category, Required: nf.Required, Muted: muted,
			Channels: map[string]notifyd.Mode{}}
		for _, ch := range reg.PerRecipient() {
			if channels.Uses(nf, ch) {
				e.Channels[ch] = reg.ResolveTenant(nf, ch, rules, defaults, muted).Mode
			}
		}
		out[name] = e
	}
	return out
}
