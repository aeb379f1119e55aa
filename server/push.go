package server

import (
	"context"
	"errors"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/stores"
)

// pushSubscriptions is the daemon's channels.PushSubscriptions: the web push
// channel reads and updates the recipients' subscriptions through it. The
// registry opens the channels before the pool exists, so db is set once it
// does; sends start only after that.
type pushSubscriptions struct {
	db stores.DB
}

var _ channels.PushSubscriptions = (*pushSubscriptions)(nil)

var errNoPool = errors.New("push subscriptions: the database is not open yet")

func (p *pushSubscriptions) List(ctx context.Context, recipient string) ([]channels.PushSubscription, error) {
	if p.db == nil {
		return nil, errNoPool
	}
	subs, err := stores.ListPushSubscriptions(ctx, p.db, recipient)
	if err != nil {
		return nil, err
	}
	out := make([]channels.PushSubscription, len(subs))
	for i, s := range subs {
		out[i] = channels.PushSubscription{ID: s.ID, Recipient: s.Recipient, Endpoint: s.Endpoint, P256dh: s.P256dh,
			Auth: s.Auth, CreatedAt: s.CreatedAt, LastSuccessAt: s.LastSuccessAt, Failures: s.Failures}
	}
	return out, nil
}

func (p *pushSubscriptions) Succeeded(ctx context.Context, ids []string) error {
	if p.db == nil {
		return errNoPool
	}
	return stores.PushSucceeded(ctx, p.db, ids)
}

func (p *pushSubscriptions) Failed(ctx context.Context, ids []string) error {
	if p.db == nil {
		return errNoPool
	}
	return stores.PushFailed(ctx, p.db, ids)
}

func (p *pushSubscriptions) Remove(ctx context.Context, ids []string) error {
	if p.db == nil {
		return errNoPool
	}
	return stores.RemovePushSubscriptions(ctx, p.db, ids)
}

// pushService returns the opened channel that delivers to push
// subscriptions, nil when none is configured.
func pushService(set *channels.Set) channels.PushService {
	for _, name := range set.Registry.Names() {
		if v, ok := set.Opened(name); ok {
			if ps, ok := v.(channels.PushService); ok {
				return ps
			}
		}
	}
	return nil
}
