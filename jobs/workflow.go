package jobs

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/stores"
)

// Workflows (docs/workflows.md) are decided where the rows are written: the
// fan-out lays each delivery out with its due instant (delay, quiet hours),
// its `unless` condition and, for a throttled channel, a throttle candidate;
// the chunk's one statement admits or refuses the candidates
// (notify_throttle); a send job scheduled for the due instant claims the row
// and reads the condition in the claim's own statement
// (stores.ClaimDeliveries). Nothing is held in memory across a transaction,
// so a crash replays or re-drives rows and never loses a decision.

// workflow lays out the workflow of the fan-out's delivery rows at one
// instant (the chunk's).
type workflow struct {
	now      time.Time
	fallback *time.Location // digest.timezone: the zone of a recipient without one
	zones    map[string]*time.Location
}

func (d *Deps) newWorkflow() *workflow {
	return &workflow{now: d.now(), fallback: d.Config.Digest.Location, zones: map[string]*time.Location{}}
}

// quiet is a recipient's quiet hours and the zone they are written in.
type quiet struct {
	hours notifytype.QuietHours
	zone  string
}

// apply sets the workflow of c's last delivery row, recipient's (""
// for a bulk delivery) on channel p of notifier nf: an `unless` condition,
// a due instant — the channel's delay after now, moved to the end of the
// recipient's quiet hours when it falls inside them (not for a required
// notifier, and only for a channel that reaches the person directly: a
// per-recipient channel that is not the inbox) — which makes the row
// `scheduled`, and a throttle candidate for a throttled channel. Rows that
// are settled already (unavailable, skipped) are left alone.
func (wf *workflow) apply(c *stores.Chunk, nf *config.Notifier, p channels.Plugin, recipient string, q *quiet) {
	i := len(c.DeliveryIDs) - 1
	nc := nf.Channels[p.Name]
	if i < 0 || nc == nil || p.Inbox {
		return
	}
	status := notifytype.DeliveryStatus(c.DeliveryStatuses[i])
	if status != notifytype.StatusPending && status != notifytype.StatusDigestPending {
		return
	}
	if nc.Unless != "" && recipient != "" {
		grow(c)
		c.DeliveryUnless[i] = nc.Unless
	}
	if status != notifytype.StatusPending {
		return // a digest row waits for the digest's schedule, not for a delay
	}
	var due time.Time
	if nc.Delay > 0 {
		due = wf.now.Add(nc.Delay.D())
	}
	if q != nil && recipient != "" && p.PerRecipient && !nf.Required {
		at := due
		if at.IsZero() {
			at = wf.now
		}
		if end, ok := q.hours.Holds(at, wf.zone(q.zone)); ok {
			due = end
		}
	}
	if !due.IsZero() {
		grow(c)
		c.DeliveryStatuses[i] = string(notifytype.StatusScheduled)
		c.DeliveryDue[i] = &due
	}
	if t := nc.Throttle; t != nil && recipient != "" {
		c.ThrottleIDs = append(c.ThrottleIDs, c.DeliveryIDs[i])
		c.ThrottleRecipients = append(c.ThrottleRecipients, recipient)
		c.ThrottleChannels = append(c.ThrottleChannels, p.Name)
		c.ThrottleLimits = append(c.ThrottleLimits, int32(t.Limit))
		c.ThrottlePers = append(c.ThrottlePers, t.Per.D().Seconds())
		c.ThrottleErrors = append(c.ThrottleErrors, fmt.Sprintf(
			"throttled: notifier %s sends at most %d %s per %s to a recipient", nf.Name, t.Limit, p.Name, t.Per))
	}
}

// zone loads a recipient's timezone once per chunk: an empty or unknown
// name reads as digest.timezone (UTC by default).
func (wf *workflow) zone(name string) *time.Location {
	if name == "" {
		return wf.fallback
	}
	if loc, ok := wf.zones[name]; ok {
		return loc
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		loc = wf.fallback
	}
	wf.zones[name] = loc
	return loc
}

// insertScheduledSendJobs enqueues send jobs for scheduled deliveries, each
// job scheduled for its deliveries' due instant (River makes it available
// then), batch at a time per instant. A job that is lost is made up for by
// the retry sweep, which re-drives scheduled rows overdue by a lease.
func insertScheduledSendJobs(ctx context.Context, tx pgx.Tx, ids []string, due []time.Time, batch int) error {
	if len(ids) == 0 {
		return nil
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("enqueue scheduled sends: %w", err)
	}
	return insertScheduledSendJobsWith(ctx, tx, client, ids, due, batch)
}

// insertScheduledSendJobsWith is insertScheduledSendJobs through a given
// River client (the fan-out claimer runs outside a worker).
func insertScheduledSendJobsWith(ctx context.Context, tx pgx.Tx, client *river.Client[pgx.Tx], ids []string,
	due []time.Time, batch int) error {
	if len(ids) == 0 {
		return nil
	}
	if batch <= 0 {
		batch = DefaultSendBatch
	}
	order := make([]int, len(ids))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return due[a].Compare(due[b]) })
	var params []river.InsertManyParams
	for start := 0; start < len(order); {
		at := due[order[start]]
		end := start
		var group []string
		for end < len(order) && due[order[end]].Equal(at) && len(group) < batch {
			group = append(group, ids[order[end]])
			end++
		}
		params = append(params, river.InsertManyParams{Args: SendArgs{DeliveryIDs: group},
			InsertOpts: &river.InsertOpts{ScheduledAt: at}})
		start = end
	}
	if err := insertJobs(ctx, tx, client, params); err != nil {
		return fmt.Errorf("enqueue %d scheduled sends: %w", len(ids), err)
	}
	return nil
}
