package channels

import "github.com/notifyd/notifyd/config"

// checkWorkflow reports the workflow keys of notifier nf's section for
// channel p that the channel cannot honour. The inbox is written inside the
// fan-out, so nothing delays, conditions or throttles it; `unless` and
// `throttle` are about one recipient, so a bulk-only channel has no use for
// them; and `unless` reads the notification's in-app item, so the notifier
// must use the inbox.
func (r *Registry) checkWorkflow(nf *config.Notifier, p Plugin, nc *config.NotifierChannel, problems *config.Problems) {
	sec := nc.Section
	if p.Inbox {
		for _, key := range []string{"delay", "unless", "throttle"} {
			if problems.Has(sec, key) {
				problems.Add(sec, key, "%s is the inbox, written at fan-out: %s applies to the other channels", p.Name, key)
			}
		}
		return
	}
	if !p.PerRecipient {
		for _, key := range []string{"unless", "throttle"} {
			if problems.Has(sec, key) {
				problems.Add(sec, key, "%s sends one message to the whole audience: %s is per recipient", p.Name, key)
			}
		}
	}
	if nc.Unless != "" {
		inbox := r.Inbox()
		if inbox == "" || !Uses(nf, inbox) {
			problems.Add(sec, "unless", "unless %s reads the notification's inbox item, but notifier %s does not use the inbox channel%s",
				nc.Unless, nf.Name, named(inbox))
		}
	}
}

func named(inbox string) string {
	if inbox == "" {
		return " (none is registered)"
	}
	return " (" + inbox + ")"
}
