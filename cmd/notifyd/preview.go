package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/channels/builtin"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/server"
	"github.com/notifyd/notifyd/templates"
)

// PreviewCommand is `notifyd preview`: what a notifier's message looks like
// on one channel, rendered with the notifier's example params (or -params)
// for a sample recipient, without sending anything or touching a database
// (but with -tenant, whose branding it reads from database.url).
type PreviewCommand struct{ main *Main }

// Run prints each part of the rendered message ("subject:", "text:",
// "html:" for email; "title:", "body:", "url:" for the inbox).
func (c *PreviewCommand) Run(ctx context.Context, args []string) error {
	var path, notifier, channel, params, locale, name, tenantID string
	fs := c.main.newFlagSet("preview", &path)
	fs.StringVar(&notifier, "notifier", "", "notifier name (required)")
	fs.StringVar(&channel, "channel", "", "channel name (required), e.g. email or in_app")
	fs.StringVar(&params, "params", "", "params as a JSON object (default: the notifier's example params)")
	fs.StringVar(&locale, "locale", "", "the recipient's locale: picks email templates, and the catalog t reads (default: default_locale)")
	fs.StringVar(&name, "name", "Ada Lovelace", "the recipient's name ({{recipient.Name}})")
	fs.StringVar(&tenantID, "tenant", "", "render in this tenant's brand (.Tenant), read from database.url")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if notifier == "" || channel == "" {
		return errors.New("-notifier and -channel are required")
	}
	cfg, err := server.LoadConfig(path)
	if err != nil {
		return err
	}
	nf, ok := cfg.Notifier(notifier)
	if !ok {
		return fmt.Errorf("%s: unknown notifier %q (have %v)", path, notifier, cfg.NotifierNames())
	}
	if !channels.Uses(nf, channel) {
		return fmt.Errorf("%s: notifier %q has no %q channel (it uses %v)", path, notifier, channel,
			sortedNames(nf.Channels))
	}
	// The example params were checked when the config loaded; a batched
	// notifier's carry the batch fields of a batch of two.
	p := nf.ExampleParams()
	if params != "" {
		p = map[string]any{}
		if err := json.Unmarshal([]byte(params), &p); err != nil {
			return fmt.Errorf("-params: want a JSON object: %w", err)
		}
		if err := nf.ValidateParams(p); err != nil {
			return fmt.Errorf("-params: %w", err)
		}
		if nf.Batch != nil {
			p = templates.BatchParams(p, 1, nil, []any{p}) // a batch of one
		}
	}
	var tenant *notifytype.Tenant
	if tenantID != "" {
		pool, err := server.OpenPool(ctx, cfg)
		if err != nil {
			return fmt.Errorf("-tenant: %w", err)
		}
		tenant, err = server.TemplateTenant(ctx, pool, tenantID)
		pool.Close()
		if err != nil {
			return fmt.Errorf("-tenant: %w", err)
		}
	}
	p = cfg.Localize(notifytype.TemplateParams(p, tenant), locale, "")
	set, err := builtin.MustRegistry().OpenToCheck(cfg)
	if err != nil {
		return err
	}
	defer set.Close()
	v, ok := set.Opened(channel)
	if !ok {
		return fmt.Errorf("%s: channel %q is not configured (channels.%s)", path, channel, channel)
	}
	pv, ok := v.(channels.Previewer)
	if !ok {
		return fmt.Errorf("channel %q cannot preview its messages", channel)
	}
	parts, err := pv.Preview(notifier, p, channels.Recipient{ID: "preview", Name: name,
		Email: "ada@example.test", Locale: locale})
	if err != nil {
		return fmt.Errorf("render %s on %s: %w", notifier, channel, err)
	}
	for _, part := range parts {
		fmt.Fprintf(c.main.Stdout, "%s:\n%s\n\n", part.Name, part.Value)
	}
	return nil
}

func sortedNames[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
