package main

import (
	"context"
	"sync"
	"time"
)

// pacedSenders is how many application goroutines a paced scenario may use:
// enough that sends never queue behind each other at the rates the bench asks
// for (a send is a few milliseconds), few enough to stay an application's
// handful of request handlers.
const pacedSenders = 8

// paced calls send(i) for i in [0, n) on an open-loop schedule at rate per
// second: call i starts at start + i/rate whatever the calls before it took,
// on one of pacedSenders goroutines. A closed loop (one goroutine waiting
// for a ticker) sends slower as soon as the system under test slows it down,
// so the load it offers falls below the rate asked for exactly when the
// latency would rise; here a slow send delays only itself. It returns the
// time from the first scheduled start to the return of the last call, and
// the first error (the remaining calls are not made).
func paced(ctx context.Context, n int, rate float64, send func(i int) error) (time.Duration, error) {
	return pacedWith(ctx, n, rate, pacedSenders, send)
}

// pacedWith is paced on up to senders goroutines: for calls that may take
// longer than senders/rate seconds (an HTTP request to a loaded server),
// which would otherwise start late.
func pacedWith(ctx context.Context, n int, rate float64, senders int, send func(i int) error) (time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	interval := time.Duration(float64(time.Second) / rate)
	work := make(chan int)
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	for range min(senders, n) {
		wg.Go(func() {
			for i := range work {
				if err := send(i); err != nil {
					once.Do(func() { firstErr = err; cancel() })
				}
			}
		})
	}
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
dispatch:
	for i := range n {
		timer.Reset(time.Until(start.Add(time.Duration(i) * interval)))
		select {
		case <-ctx.Done():
			break dispatch
		case <-timer.C:
		}
		select {
		case <-ctx.Done():
			break dispatch
		case work <- i:
		}
	}
	close(work)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err() // the caller's context ended
	}
	return time.Since(start), firstErr
}
