package failover

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/notifyd/notifyd/channels"
)

// clock is a settable time for the breakers and rate limits.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func list(t *testing.T, c *clock, specs ...Spec) *List[int] {
	t.Helper()
	l := &List[int]{Channel: "test", Exhausted: "every test provider failed", Clock: c.Now}
	for i, s := range specs {
		p, err := NewProvider(s, i)
		if err != nil {
			t.Fatal(err)
		}
		l.Providers = append(l.Providers, p)
	}
	return l
}

// send sends through l with answers by provider index, and returns the
// report and the providers tried.
func send(l *List[int], answers map[int]error) (*channels.Report, []int, error) {
	ctx, rep := channels.WithReport(context.Background())
	var tried []int
	err := l.Send(ctx, func(_ context.Context, p *Provider[int]) (string, error) {
		tried = append(tried, p.Via)
		if err := answers[p.Via]; err != nil {
			return "", err
		}
		return "id-" + p.Name, nil
	})
	return rep, tried, err
}

// TestSendFailsOverOnlyOnTheProvidersTrouble: a temporary error or a rate
// limit moves on; a permanent one ends the send at that provider.
func TestSendFailsOverOnlyOnTheProvidersTrouble(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	for _, tc := range []struct {
		name   string
		first  error
		tried  int
		sentBy string
		kind   channels.Kind
	}{
		{"temporary", channels.Temporary(errors.New("503"), 0), 2, "b", 0},
		{"rate limited", channels.RateLimited(errors.New("429"), time.Second), 2, "b", 0},
		{"permanent", channels.Permanent(errors.New("invalid number")), 1, "", channels.KindPermanent},
	} {
		l := list(t, c, Spec{Name: "a", Timeout: time.Second}, Spec{Name: "b", Timeout: time.Second})
		rep, tried, err := send(l, map[int]error{0: tc.first})
		if len(tried) != tc.tried {
			t.Errorf("%s: tried %v", tc.name, tried)
		}
		if tc.sentBy != "" {
			if err != nil || rep.Provider != tc.sentBy || rep.ProviderMessageID != "id-"+tc.sentBy {
				t.Errorf("%s: report %q %q, %v", tc.name, rep.Provider, rep.ProviderMessageID, err)
			}
			continue
		}
		if k, _ := channels.Classify(err); k != tc.kind || rep.Provider != "a" {
			t.Errorf("%s: %v (%v), provider %q", tc.name, err, k, rep.Provider)
		}
	}
}

// TestEveryProviderFailed: temporary, naming each failure; rate limited
// for the shortest wait when every provider was over its rate.
func TestEveryProviderFailed(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	l := list(t, c, Spec{Name: "a", Timeout: time.Second}, Spec{Name: "b", Timeout: time.Second})
	_, _, err := send(l, map[int]error{0: channels.Temporary(errors.New("down"), 0), 1: channels.RateLimited(errors.New("429"), time.Second)})
	if k, _ := channels.Classify(err); k != channels.KindTemporary || !strings.Contains(err.Error(), "every test provider failed: a: down; b: 429") {
		t.Errorf("%v (%v)", err, k)
	}
	_, _, err = send(l, map[int]error{0: channels.RateLimited(errors.New("429"), 3*time.Second), 1: channels.RateLimited(errors.New("429"), time.Second)})
	if k, after := channels.Classify(err); k != channels.KindRateLimited || after != time.Second {
		t.Errorf("%v (%v, %s), want rate limited for 1s", err, k, after)
	}
}

// TestBreakerSkipsAFailingProviderForItsCooldown: three failures in a row
// open a provider's breaker; the next messages skip it until the cool-down
// is over, and a success closes it.
func TestBreakerSkipsAFailingProviderForItsCooldown(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	l := list(t, c, Spec{Name: "a", Timeout: time.Second}, Spec{Name: "b", Timeout: time.Second})
	down := map[int]error{0: channels.Temporary(errors.New("down"), 0)}
	for range BreakerThreshold {
		if _, tried, _ := send(l, down); len(tried) != 2 {
			t.Fatalf("tried %v before the breaker opened", tried)
		}
	}
	if _, tried, err := send(l, down); err != nil || len(tried) != 1 || tried[0] != 1 {
		t.Fatalf("with a's breaker open: tried %v, %v", tried, err)
	}
	c.now = c.now.Add(BreakerCooldown)
	if _, tried, _ := send(l, nil); len(tried) != 1 || tried[0] != 0 {
		t.Fatalf("after the cool-down: tried %v, want a again", tried)
	}
}

// TestRateMovesToTheNext: a provider over its own rate hands the message on.
func TestRateMovesToTheNext(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	l := list(t, c, Spec{Name: "a", Timeout: time.Second, Rate: "1/h"}, Spec{Name: "b", Timeout: time.Second})
	for _, want := range []string{"a", "b"} {
		if rep, _, err := send(l, nil); err != nil || rep.Provider != want {
			t.Fatalf("provider %q, %v; want %s", rep.Provider, err, want)
		}
	}
}

func TestParseRate(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{"": 0, "0": 0, "14/s": 14, "14": 14, "600/m": 10, "7200/h": 2, "0.5/s": 0.5} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"fast", "14/d", "-1/s", "1e400"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) did not fail", in)
		}
	}
}
