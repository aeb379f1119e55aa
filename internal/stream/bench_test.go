package stream_test

import (
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/internal/stream"
	"github.com/notifyd/notifyd/internal/testing/pgtest"
)

// BenchmarkCommitToStream measures the stream latency that
// docs/performance.md sets targets for: from the commit of a fan-out-style
// transaction (inbox item plus change row, through one replica's pool) to its
// inbox.created event parsed by a client of another replica's Hub. It reports the p50 and p99 in milliseconds (targets
// 50 and 250); benchmarks report, they do not assert.
func BenchmarkCommitToStream(b *testing.B) {
	writer, dbURL := pgtest.NewDBURL(b)
	pool, err := pgxpool.New(b.Context(), dbURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	hub := newHub(b, pool)
	srv := serve(b, hub, stream.HandlerOptions{}, nil)
	run(b, hub)
	const me = "bench-me"
	c := connect(b, srv, me, "")
	c.expect(b, "counts")

	var lat []time.Duration
	for b.Loop() {
		id := create(b, writer, me)[0]
		committed := time.Now()
		c.expectCreated(b, id)
		lat = append(lat, time.Since(committed))
		c.expect(b, "counts")
	}
	slices.Sort(lat)
	quantile := func(q float64) float64 {
		return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(quantile(0.50), "p50-ms")
	b.ReportMetric(quantile(0.99), "p99-ms")
}
