package jobs

import (
	"time"

	"github.com/riverqueue/river/rivertype"
)

// Metrics is what the workers report as they go. The daemon passes its
// Prometheus series (server does); a nil Deps.Metrics reports nothing.
type Metrics interface {
	// Notification counts a notification taken up by the fan-out, by
	// outcome ("accepted", "rejected").
	Notification(notifier, outcome string)
	// Delivery counts n deliveries of channel reaching status.
	Delivery(channel, status string, n int)
	// Send observes one provider call.
	Send(channel, outcome string, d time.Duration)
	// DigestRun counts a digest job by outcome.
	DigestRun(outcome string)
	// Redriven counts deliveries re-driven by the retry sweep.
	Redriven(n int)
	// Rescued counts River jobs rescued from a process that died.
	Rescued(n int)
	// FanoutRows counts rows written by a fan-out chunk.
	FanoutRows(inbox, deliveries int)
	// RiverMiddleware is River middleware that reports River's own job
	// series, or nil for none.
	RiverMiddleware() rivertype.Middleware
}

// noMetrics reports nothing.
type noMetrics struct{}

func (noMetrics) Notification(string, string)           {}
func (noMetrics) Delivery(string, string, int)          {}
func (noMetrics) Send(string, string, time.Duration)    {}
func (noMetrics) DigestRun(string)                      {}
func (noMetrics) Redriven(int)                          {}
func (noMetrics) Rescued(int)                           {}
func (noMetrics) FanoutRows(int, int)                   {}
func (noMetrics) RiverMiddleware() rivertype.Middleware { return nil }

// metrics is d.Metrics, or one that reports nothing.
func (d *Deps) metrics() Metrics {
	if d.Metrics == nil {
		return noMetrics{}
	}
	return d.Metrics
}
