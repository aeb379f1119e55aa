package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/server/servertest"
	"github.com/notifyd/notifyd/stores"
)

func TestEmailUnknownMailboxIsSuppressed(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	b.profile(t, "u1", "Gone@Example.test")
	b.profile(t, "u2", "ok@example.test")
	b.smtp.FailRecipient("gone@example.test", 0)
	b.smtp.FailNextRcpt(1, 550, "5.1.1 no such user here")
	servertest.StartWorkers(t, b.deps)
	first := b.send(t, "inv-1", "u1")
	d := b.waitDelivery(t, first, "u1", "refused")
	if !strings.Contains(d.lastError, "5.1.1") {
		t.Fatalf("refused delivery: last_error %q", d.lastError)
	}
	s, err := stores.GetSuppression(context.Background(), b.pool, "email", "gone@example.test")
	if err != nil {
		t.Fatalf("address not suppressed after a 5.1.1: %v", err)
	}
	if !strings.Contains(s.Reason, "5.1.1") || !strings.Contains(s.Reason, "no such user here") {
		t.Errorf("reason = %q", s.Reason)
	}

	// The next notification: suppressed without a provider call (the claim
	// settles it: no attempt is counted), the other recipient is sent.
	second := b.send(t, "inv-2", "u1", "u2")
	b.waitDelivery(t, second, "u2", "sent")
	d = b.waitDelivery(t, second, "u1", "suppressed")
	if d.attempts != 0 || !strings.Contains(d.lastError, "suppressed") || !strings.Contains(d.lastError, "5.1.1") {
		t.Fatalf("suppressed delivery: %+v", d)
	}
	if got := b.smtp.Count(); got != 1 {
		t.Fatalf("%d messages received, want only u2's", got)
	}
	for _, m := range b.smtp.Messages() {
		if strings.Contains(strings.ToLower(strings.Join(m.To, ",")), "gone@") {
			t.Fatalf("a message reached the suppressed address: %v", m.To)
		}
	}

	// Lifted: sent again.
	if ok, err := stores.DeleteSuppression(context.Background(), b.pool, "email", "GONE@example.test"); err != nil || !ok {
		t.Fatalf("DeleteSuppression = %v, %v", ok, err)
	}
	third := b.send(t, "inv-3", "u1")
	b.waitDelivery(t, third, "u1", "sent")
}

func TestDigestToSuppressedAddressIsNotSent(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	b.profile(t, "u1", "u1@example.test")
	b.profile(t, "u2", "u2@example.test")
	if err := stores.PutSuppressions(context.Background(), b.pool,
		[]stores.Suppression{{Channel: "email", Address: "U1@example.test", Reason: "complaint"}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	client := servertest.StartWorkers(t, b.deps)
	b.report(t, "a", "u1", "u2")
	b.report(t, "b", "u1")
	b.waitRows(t, "digest_pending", 3)
	b.ahead(13 * time.Hour)
	b.sweep(t, client)
	b.waitRows(t, "suppressed", 2)
	b.waitRows(t, "digest_sent", 1)
	m := b.onlyMessage(t)
	if len(m.To) != 1 || m.To[0] != "u2@example.test" {
		t.Fatalf("digest went to %v", m.To)
	}
	if st, lastErr, _ := b.rowStatus(t, "b", "u1"); st != "suppressed" || !strings.Contains(lastErr, "complaint") {
		t.Fatalf("u1's row: %s %q", st, lastErr)
	}
}

func TestDigestUnknownMailboxSuppresses(t *testing.T) {
	t.Parallel()
	b := setupDigest(t, fmt.Sprintf("digest: {schedule: %q, sweep: \"0 0 1 1 *\"}\n", soonSchedule()))
	b.profile(t, "u1", "u1@example.test")
	client := servertest.StartWorkers(t, b.deps)
	b.report(t, "a", "u1")
	b.waitRows(t, "digest_pending", 1)
	b.smtp.FailNextRcpt(1, 550, "5.1.1 no such mailbox")
	b.ahead(13 * time.Hour)
	b.sweep(t, client)
	b.waitRows(t, "digest_failed", 1)
	servertest.Eventually(t, 10*time.Second, "u1 suppressed", func() bool {
		_, err := stores.GetSuppression(context.Background(), b.pool, "email", "u1@example.test")
		return err == nil
	})
}
