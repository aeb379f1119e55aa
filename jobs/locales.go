package jobs

import (
	"fmt"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/stores"
	"github.com/notifyd/notifyd/templates"
)

// locale returns the Locale a recipient's messages render in: their locale
// tag ("" is the default locale) and time zone ("" or unknown: the digest
// zone), with the tenant's overrides. nil when no catalogs are configured:
// templates then render as written (and none calls t: check refuses it).
func (d *Deps) locale(tag, timezone string, overrides *templates.Overrides) *templates.Locale {
	cat := d.Config.Catalog
	if cat == nil {
		return nil
	}
	return cat.Locale(tag, DigestLocation(timezone, d.Config.Digest.Location), overrides)
}

// localized returns params with the recipient's Locale (see locale).
func (d *Deps) localized(params map[string]any, r *channels.Recipient, overrides *templates.Overrides) map[string]any {
	if d.Config.Catalog == nil {
		return params
	}
	if r == nil {
		return templates.WithLocale(params, d.locale("", "", overrides))
	}
	return templates.WithLocale(params, d.locale(r.Locale, r.Timezone, overrides))
}

// localeKey is a recipient's (locale, zone) pair: the inbox item is
// rendered once per distinct pair of a chunk, never per recipient.
type localeKey struct{ tag, zone string }

// localizeInbox renders the chunk's inbox item in every (locale, zone) its
// recipients read other than the default's (the chunk's Title, Body and URL,
// rendered by resolve), and points each inbox row at its text. params are
// the notification's params as the inbox templates see them (tenant and
// batch fields included).
func (d *Deps) localizeInbox(c *stores.Chunk, nf *config.Notifier, m merged, params map[string]any,
	overrides *templates.Overrides) error {
	if d.Config.Catalog == nil || d.Inbox == nil || len(c.InboxIDs) == 0 {
		return nil
	}
	byID := make(map[string]localeKey, len(m.recipients))
	for i := range m.recipients {
		r := &m.recipients[i]
		byID[r.ID] = localeKey{r.Locale, r.Timezone}
	}
	def := localeKey{}
	variant := map[localeKey]int32{def: 0}
	c.InboxVariants = make([]int32, len(c.InboxIDs))
	for i, id := range c.InboxRecipients {
		k := byID[id]
		if canonicalDefault(d, k) {
			k = def
		}
		v, ok := variant[k]
		if !ok {
			item, err := d.Inbox.RenderInbox(nf.Name, templates.WithLocale(params, d.locale(k.tag, k.zone, overrides)))
			if err != nil {
				return fmt.Errorf("render the in-app item in %q (%s): %w", k.tag, k.zone, err)
			}
			c.Variants = append(c.Variants, stores.InboxText{Title: item.Title, Body: item.Body, URL: item.URL})
			v = int32(len(c.Variants))
			variant[k] = v
		}
		c.InboxVariants[i] = v
	}
	return nil
}

// canonicalDefault reports whether k renders as the default (locale, zone)
// does: no locale or the default one, and no zone or the digest zone.
func canonicalDefault(d *Deps, k localeKey) bool {
	cat := d.Config.Catalog
	return (k.tag == "" || k.tag == cat.Default) && (k.zone == "" || k.zone == d.Config.Digest.Location.String())
}

// localizeChunk gives the chunk's inbox rows their recipients' texts (see
// localizeInbox), from the notification's params as resolve rendered them:
// as a batch of one for a batched notifier, with the tenant.
func (d *Deps) localizeChunk(c *stores.Chunk, st *stores.FanoutState, nf *config.Notifier, m merged) error {
	if d.Config.Catalog == nil || d.Inbox == nil || len(c.InboxIDs) == 0 {
		return nil
	}
	params, err := decodeParams(st.Params)
	if err != nil {
		return err
	}
	if nf.Batch != nil {
		params = templates.BatchParams(params, 1, nonEmpty(st.Actor), []any{params})
	}
	tenant, err := decodeTenant(st.TenantRecord)
	if err != nil {
		return err
	}
	return d.localizeInbox(c, nf, m, notifytype.TemplateParams(params, tenant), nil)
}
