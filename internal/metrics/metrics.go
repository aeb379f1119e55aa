// Package metrics defines notifyd's Prometheus series. A *Metrics is created
// once per daemon against a registry that is passed in (never the global
// default), and handed to the workers and the HTTP API. Every method is safe
// on a nil *Metrics, so tests and tools can leave metrics out.
package metrics

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Metrics holds every notifyd series.
type Metrics struct {
	notifications *prometheus.CounterVec
	deliveries    *prometheus.CounterVec
	sendLatency   *prometheus.HistogramVec
	digestRuns    *prometheus.CounterVec
	redriven      prometheus.Counter
	rescued       prometheus.Counter
	fanoutRows    *prometheus.CounterVec
	limited       *prometheus.CounterVec
	river         *otelriver.Middleware
}

// New registers notifyd's series on reg. streamClients, when not nil, is read
// at scrape time for the notifyd_stream_clients gauge.
func New(reg prometheus.Registerer, streamClients func() int) (*Metrics, error) {
	m := &Metrics{
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifyd_notifications_total",
			Help: "Notifications taken up by the fan-out, by notifier and outcome (accepted, rejected).",
		}, []string{"notifier", "outcome"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifyd_deliveries_total",
			Help: "Deliveries that reached a status, by channel and status (terminal statuses, plus failed and rate_limited attempts).",
		}, []string{"channel", "status"}),
		sendLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "notifyd_send_duration_seconds",
			Help:    "Time of one provider call (SMTP conversation, webhook POST), by channel and outcome.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"channel", "outcome"}),
		digestRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifyd_digest_runs_total",
			Help: "Digest jobs run, by outcome (sent, failed, retried, empty, lost_claim).",
		}, []string{"outcome"}),
		redriven: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "notifyd_sweep_redriven_total",
			Help: "Deliveries the retry sweep took back from a dead claim or re-drove after a lost job.",
		}),
		rescued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "notifyd_rescued_jobs_total",
			Help: "River jobs made available again because the process running them died (its liveness lock was free).",
		}),
		fanoutRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "notifyd_fanout_rows_total",
			Help: "Rows written by the fan-out, by kind (inbox, delivery).",
		}, []string{"kind"}),
	}
	m.limited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "notifyd_http_limited_total",
		Help: "API requests refused by a limit, by limit (" + strings.Join(Limits, ", ") + ").",
	}, []string{"limit"})
	for _, l := range Limits {
		m.limited.WithLabelValues(l) // every limit's series exists from the start, at 0
	}
	reg.MustRegister(m.notifications, m.deliveries, m.sendLatency, m.digestRuns, m.redriven, m.rescued, m.fanoutRows, m.limited)
	// River's series come from its OpenTelemetry middleware, bridged into the
	// same registry by the OTel Prometheus exporter. Tracing stays off (no
	// TracerProvider is configured, so spans go to OTel's no-op default).
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("metrics: River's OpenTelemetry exporter: %w", err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	m.river = otelriver.NewMiddleware(&otelriver.MiddlewareConfig{MeterProvider: provider, DurationUnit: "s"})
	if streamClients != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "notifyd_stream_clients",
			Help: "Inbox stream (SSE) clients connected to this replica.",
		}, func() float64 { return float64(streamClients()) }))
	}
	return m, nil
}

// Notification counts a notification taken up by the fan-out.
func (m *Metrics) Notification(notifier, outcome string) {
	if m != nil {
		m.notifications.WithLabelValues(notifier, outcome).Inc()
	}
}

// Delivery counts n deliveries of channel reaching status.
func (m *Metrics) Delivery(channel, status string, n int) {
	if m != nil && n > 0 {
		m.deliveries.WithLabelValues(channel, status).Add(float64(n))
	}
}

// Send observes one provider call.
func (m *Metrics) Send(channel, outcome string, d time.Duration) {
	if m != nil {
		m.sendLatency.WithLabelValues(channel, outcome).Observe(d.Seconds())
	}
}

// DigestRun counts a digest job by outcome.
func (m *Metrics) DigestRun(outcome string) {
	if m != nil {
		m.digestRuns.WithLabelValues(outcome).Inc()
	}
}

// Redriven counts deliveries re-driven by the retry sweep.
func (m *Metrics) Redriven(n int) {
	if m != nil && n > 0 {
		m.redriven.Add(float64(n))
	}
}

// Rescued counts River jobs rescued from a process that died.
func (m *Metrics) Rescued(n int) {
	if m != nil && n > 0 {
		m.rescued.Add(float64(n))
	}
}

// FanoutRows counts rows written by a fan-out chunk.
func (m *Metrics) FanoutRows(inbox, deliveries int) {
	if m != nil {
		m.fanoutRows.WithLabelValues("inbox").Add(float64(inbox))
		m.fanoutRows.WithLabelValues("delivery").Add(float64(deliveries))
	}
}

// The limits Limited counts.
const (
	LimitRecipientRate = "recipient_rate" // http.rate.recipient: 429
	LimitAdminRate     = "admin_rate"     // http.rate.admin: 429
	LimitTopics        = "topics"         // http.max_topics: 422 too_many_topics
	LimitRecipients    = "recipients"     // the raw recipients array: 422 too_many_recipients
	LimitStreams       = "streams"        // http.max_streams_per_recipient: 429
)

// Limits lists every limit Limited counts.
var Limits = []string{LimitRecipientRate, LimitAdminRate, LimitTopics, LimitRecipients, LimitStreams}

// Limited counts an API request refused by limit (one of Limits).
func (m *Metrics) Limited(limit string) {
	if m != nil {
		m.limited.WithLabelValues(limit).Inc()
	}
}

// RiverMiddleware returns River's own OpenTelemetry middleware (otelriver),
// exporting through the same Prometheus registry: job insert and work counts
// and durations by kind, queue and outcome. It returns nil for a nil
// *Metrics.
func (m *Metrics) RiverMiddleware() rivertype.Middleware {
	if m == nil || m.river == nil {
		return nil
	}
	return m.river
}
