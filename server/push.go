package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/stores"
)

// pushSubscriptions is the daemon's channels.PushSubscriptions: the web push
// channel reads and updates the recipients' subscriptions through it. The
// registry opens the channels before the pool exists, so db is set once it
// does; sends start only after that.
//
// Successes are the common case, one per push: they are gathered and
// written in one statement every successFlush (or successBatch ids),
// rather than a round trip each (see successes). Close writes what is left.
type pushSubscriptions struct {
	db     stores.DB
	logger *slog.Logger
	ok     successes
}

const (
	successFlush = 50 * time.Millisecond
	successBatch = 500
)

var _ channels.PushSubscriptions = (*pushSubscriptions)(nil)

var errNoPool = errors.New("push subscriptions: the database is not open yet")

func (p *pushSubscriptions) List(ctx context.Context, recipients []string) (map[string][]channels.PushSubscription, error) {
	if p.db == nil {
		return nil, errNoPool
	}
	subs, err := stores.ListPushSubscriptionsOf(ctx, p.db, recipients)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]channels.PushSubscription, len(subs))
	for r, list := range subs {
		for _, s := range list {
			out[r] = append(out[r], channels.PushSubscription{ID: s.ID, Recipient: s.Recipient, Tenant: s.Tenant, Endpoint: s.Endpoint,
				P256dh: s.P256dh, Auth: s.Auth, CreatedAt: s.CreatedAt, LastSuccessAt: s.LastSuccessAt, Failures: s.Failures})
		}
	}
	return out, nil
}

func (p *pushSubscriptions) Succeeded(_ context.Context, ids []string) error {
	if p.db == nil {
		return errNoPool
	}
	p.ok.add(ids, func(ctx context.Context, ids []string) {
		if err := stores.PushSucceeded(ctx, p.db, ids); err != nil && p.logger != nil {
			p.logger.Warn("record push successes", "subscriptions", len(ids), "err", err)
		}
	})
	return nil
}

// close writes the successes not yet written.
func (p *pushSubscriptions) close() error {
	p.ok.flush()
	return nil
}

// successes gathers the ids of successful pushes and writes them in one
// statement every successFlush, or at once when successBatch are waiting:
// a send's own success is recorded shortly after it returns.
type successes struct {
	mu      sync.Mutex
	pending []string
	timer   *time.Timer
	write   func(ctx context.Context, ids []string)
}

// add gathers ids, to be written by write.
func (s *successes) add(ids []string, write func(ctx context.Context, ids []string)) {
	s.mu.Lock()
	s.write = write
	s.pending = append(s.pending, ids...)
	n := len(s.pending)
	if s.timer == nil && n < successBatch {
		s.timer = time.AfterFunc(successFlush, s.flush)
	}
	s.mu.Unlock()
	if n >= successBatch {
		s.flush()
	}
}

// flush writes the gathered successes in one statement.
func (s *successes) flush() {
	s.mu.Lock()
	ids, write := s.pending, s.write
	s.pending = nil
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.mu.Unlock()
	if len(ids) == 0 || write == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	write(ctx, ids)
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
