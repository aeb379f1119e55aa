package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/notifyd/notifyd/stores"
)

// What an operator sees of the circuit breakers (send_targets.go): a retry
// of a delivery whose target's breaker is open would only be parked again
// ("not attempted: … did not answer"), so the retry says so instead, and the
// operator may close the breaker first. Breakers live in each process's
// memory: these read and close the breakers of this process, the one whose
// send workers the Deps run.

// sendTargets is the process's targets, shared by its send workers and the
// operator's actions.
func (d *Deps) sendTargets() *targets {
	d.targetsOnce.Do(func() {
		d.targets = newTargets(d.Config.Queues.SendPerHost, d.now)
	})
	return d.targets
}

// Circuit is an open circuit breaker: a target that did not answer Failures
// times in a row, whose deliveries are parked until OpenUntil.
type Circuit struct {
	// Target names the destination: the channel, and the host or notifier
	// when the channel has several ("webhook billing.acme.test").
	Target    string
	Failures  int
	OpenUntil time.Time
	// LastError is the failure that opened it.
	LastError string
}

// DeliveryTarget names the target delivery id is sent to (see targetOf)
// and returns the delivery's status. An unknown id is stores.ErrNotFound.
func (d *Deps) DeliveryTarget(ctx context.Context, id string) (target, status string, err error) {
	m, err := stores.GetDeliveryMessage(ctx, d.Pool, id)
	if err != nil {
		return "", "", err
	}
	return d.targetOf(&m.Claimed, nil), m.Status, nil
}

// OpenCircuit returns the breaker of target when it is open in this process
// at the Deps' clock, or nil.
func (d *Deps) OpenCircuit(target string) *Circuit {
	ts := d.sendTargets()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.m[target]
	if !ok || !ts.now().Before(t.openUntil) {
		return nil
	}
	return &Circuit{Target: target, Failures: t.failures, OpenUntil: t.openUntil, LastError: t.lastErr}
}

// CloseCircuit closes the breaker of target in this process as an answer
// from it would (the next send is not parked; a new failure counts from
// zero), and reports whether it was open.
func (d *Deps) CloseCircuit(target string) bool {
	ts := d.sendTargets()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.m[target]
	if !ok {
		return false
	}
	open := ts.now().Before(t.openUntil)
	t.failures, t.open, t.openUntil, t.lastErr = 0, breakerFirstOpen, time.Time{}, ""
	ts.grant(t)
	if t.inflight == 0 && len(t.waiters) == 0 {
		delete(ts.m, target)
	}
	return open
}

// String says what the breaker does, for an operator.
func (c *Circuit) String() string {
	return fmt.Sprintf("%s did not answer %d times in a row, so its deliveries are paused until %s (last error: %s)",
		c.Target, c.Failures, c.OpenUntil.UTC().Format(time.RFC3339), c.LastError)
}
