// Package jobs holds notifyd's River job kinds and their workers: the fan-out,
// the sends, the digests and the periodic sweeps (docs/architecture.md).
//
// Every worker takes its dependencies from a *Deps built once by the daemon;
// nothing here reads globals or the environment.
package jobs

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"

	"github.com/notifyd/notifyd/channels"
	"github.com/notifyd/notifyd/config"
)

// Queue names. Each has its own max workers in config (queues:).
const (
	QueueFanout = "fanout"
	QueueSend   = "send"
	// QueueSendBulk carries the send jobs of chunked fan-outs (topics,
	// large lists, audiences), with its own queues.send workers: however
	// many of a large notification's sends are running or waiting, the send
	// queue's workers stay free for one-recipient notifications and retries.
	QueueSendBulk    = "send_bulk"
	QueueDigest      = "digest"
	QueueMaintenance = "maintenance"
)

// DigestSender sends one recipient's digest: the channel that digests.
type DigestSender = channels.DigestChannel

// Deps is what the workers need.
type Deps struct {
	Pool   *pgxpool.Pool
	Config *config.Config
	// Registry is every registered channel: the fan-out resolves each
	// recipient's mode on each of its per-recipient channels.
	Registry *channels.Registry
	// Inbox renders in-app items (nil: no inbox channel is registered).
	Inbox channels.InboxChannel
	// Channels are the configured per-recipient channels by name. A
	// registered channel missing here is not configured: its deliveries are
	// unavailable at fan-out time.
	Channels map[string]channels.Channel
	// Bulk are the configured bulk channels by name.
	Bulk map[string]channels.BulkChannel
	// Digests sends digests; nil when the channel that digests is not
	// configured (digest rows are then never written: the fan-out marks that
	// channel unavailable).
	Digests DigestSender
	Logger  *slog.Logger
	// Clock returns the current time; tests inject one. Nil means time.Now.
	Clock func() time.Time
	// AfterFanoutStep, when set, runs after each committed fan-out transaction
	// (normalisation or chunk). It is a fault-injection point for tests: an
	// error stops the job there, as a crash would, and River retries it.
	AfterFanoutStep func(notificationID string) error
	// Metrics records notifyd's Prometheus series; nil records nothing.
	Metrics Metrics
	// Backoff overrides the retry schedule of temporary send failures (tests
	// shorten it). Nil means the production schedule, see Backoff.
	Backoff func(attempt int) time.Duration
	// GoneAfter is how long a River client's liveness lock must be seen free
	// at every check before the deliveries it claimed are taken back (see
	// RunLiveness); zero means 4 s. Tests shorten it.
	GoneAfter time.Duration

	digestOnce sync.Once
	digest     *digestGroups

	live livenessState // RunLiveness's view of this and other processes

	orphansScanned atomic.Int64 // Unix nanoseconds of the last scan for orphaned fan-outs (sweeps.go)

	riverDriver riverdriver.Driver[pgx.Tx] // NewRiverClient's driver, for RiverStarted

	fanoutWakeMu sync.Mutex
	fanoutWakes  []func() // the fan-out claimers' Wake, called by this process's wake listener

	targetsOnce sync.Once
	targets     *targets // every target's gate and breaker, for this process (send_circuits.go)
}

func (d *Deps) now() time.Time {
	if d.Clock != nil {
		return d.Clock()
	}
	return time.Now()
}

// lease is how long a claimed delivery may stay claimed (retry.lease).
func (d *Deps) lease() time.Duration {
	if l := d.Config.Retry.Lease.D(); l > 0 {
		return l
	}
	return 5 * time.Minute
}

// maxAge is how long a delivery is retried before it expires (retry.max_age).
func (d *Deps) maxAge() time.Duration {
	if a := d.Config.Retry.MaxAge.D(); a > 0 {
		return a
	}
	return 72 * time.Hour
}

// retryWait is the wait before the next try after a temporary failure of the
// attempts-th attempt: the backoff schedule (Backoff, jittered; Deps.Backoff
// in tests), or the provider's Retry-After when that is longer, up to an hour.
func (d *Deps) retryWait(attempts int, retryAfter time.Duration) time.Duration {
	wait := jitter(Backoff(attempts))
	if d.Backoff != nil {
		wait = d.Backoff(attempts)
	}
	if retryAfter > wait {
		wait = min(retryAfter, time.Hour)
	}
	return wait
}

// RescueAfter is how long a River job may stay running before River's
// rescuer takes it back from a process presumed dead (a SIGKILLed replica's
// jobs are otherwise stuck for River's default hour): twice the lease, at
// least a minute. Every notifyd job bounds its own run to maxRun, well inside
// it, so a live job is never rescued.
func (d *Deps) RescueAfter() time.Duration {
	return max(2*d.lease(), time.Minute)
}

// maxRun is how long one run of a job may work before it checkpoints and
// yields (the fan-out snoozes and resumes from its cursor; a send batch gives
// back what it has not attempted; retention stops and continues next time).
func (d *Deps) maxRun() time.Duration { return d.RescueAfter() / 3 }

func (d *Deps) logger() *slog.Logger {
	if d.Logger != nil {
		return d.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// onFanoutWake registers a fan-out claimer's wake: a small notification has
// no River job, so the wake notify_enqueue sends under the fan-out queue's
// name reaches the claimers through this, beside the queue's fetch.
func (d *Deps) onFanoutWake(wake func()) {
	d.fanoutWakeMu.Lock()
	defer d.fanoutWakeMu.Unlock()
	d.fanoutWakes = append(d.fanoutWakes, wake)
}

// WakeQueue is what a wake naming queue does beyond River's fetch: for the
// fan-out queue, it wakes this process's claimers. NewRiverClient's driver
// calls it for every wake it hears.
func (d *Deps) WakeQueue(queue string) {
	if queue != QueueFanout {
		return
	}
	d.fanoutWakeMu.Lock()
	wakes := slices.Clone(d.fanoutWakes)
	d.fanoutWakeMu.Unlock()
	for _, wake := range wakes {
		wake()
	}
}

// RiverStarted tells the wake listener of the River client NewRiverClient
// made for d that the client's Start has returned (see NewRiverDriver).
func (d *Deps) RiverStarted() {
	if d.riverDriver != nil {
		RiverStarted(d.riverDriver)
	}
}
