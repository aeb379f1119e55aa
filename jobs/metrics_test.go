package jobs_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/internal/metrics"
	"github.com/notifyd/notifyd/jobs"
	"github.com/notifyd/notifyd/server/servertest"
)

// A notification whose notifier is not configured is rejected, and its
// metric series is labelled UnknownNotifierLabel, not with the name it
// carried: made-up names never create series of their own.
func TestUnknownNotifiersShareOneMetricSeries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var ids []string
	for i := range 3 {
		res, err := b.client.Send(ctx, notifyd.Notification{Notifier: "comment.created", Key: fmt.Sprint("made-up-", i),
			Actor: "user-00003", Recipients: recipients(2, "author"), Params: commentParams})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
		// As if the notifier was removed from the config since, or named by
		// an application through SQL with a catalog of its own.
		if _, err := b.pool.Exec(ctx, `UPDATE notify_notifications SET notifier = $2 WHERE id = $1`, res.ID, fmt.Sprint("made.up.", i)); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	var err error
	if b.deps.Metrics, err = metrics.New(reg, nil); err != nil {
		t.Fatal(err)
	}
	servertest.StartWorkers(t, b.deps)
	for _, id := range ids {
		waitStatus(t, b, id, "rejected")
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "notifyd_notifications_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "notifier" {
					labels[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	if len(labels) != 1 || labels[jobs.UnknownNotifierLabel] != 3 {
		t.Fatalf("notifier labels %v, want only %q counting 3", labels, jobs.UnknownNotifierLabel)
	}
}
