package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/notifyd/notifyd"
	"github.com/notifyd/notifyd/server"
)

// httpSendTarget is the HTTP send row's target: POST /v1/notifications
// requests/s at least this fraction of SendTx transactions/s.
const httpSendTarget = 0.5

// runHTTPSend is the HTTP send scenario: POST /v1/notifications, one
// in-app notification to one recipient per request, from conc clients
// against the daemon's HTTP API on 127.0.0.1, vs the application's own
// transactions, each one SendTx of the same notification, from conc
// goroutines, n of each, best of enqueueRounds alternating (a fresh database
// for each run). No workers run on either side: this is the cost of
// accepting a notification. With clientCmd set it also runs that command,
// for the client packages' rows (see runClientCommand).
func runHTTPSend(ctx context.Context, h *harness, n, conc int, clientCmd string) []Result {
	const name, unit = "POST /v1/notifications vs SendTx", "req/s"
	var best [2]measurement
	var errs [2]error
	for round := 1; round <= enqueueRounds; round++ {
		for k, measure := range []func() (measurement, error){
			func() (measurement, error) { return measureSendTxOne(ctx, h, n, conc) },
			func() (measurement, error) { return measureHTTPSend(ctx, h, n, conc) },
		} {
			if errs[k] != nil {
				continue
			}
			m, err := measure()
			if err != nil {
				errs[k] = err
				continue
			}
			fmt.Printf("  round %d: %s: %s/s (%s)\n", round, []string{"SendTx", "POST /v1/notifications"}[k],
				formatNumber(m.rate), m.note)
			if m.rate > best[k].rate {
				best[k] = m
			}
		}
	}
	var out []Result
	switch {
	case errs[1] != nil:
		out = append(out, errorResult(name, unit, ">=", httpSendTarget, "ratio", errs[1]))
	case errs[0] != nil:
		out = append(out, errorResult(name, unit, ">=", httpSendTarget, "ratio", fmt.Errorf("baseline: %w", errs[0])))
	default:
		r := ratioResult(name, unit, best[1].rate, best[0].rate, "SendTx", "tx/s", ">=", httpSendTarget)
		out = append(out, annotate(r, n, best[1], &best[0]))
	}
	if clientCmd != "" {
		out = append(out, runClientCommand(ctx, h, clientCmd, conc)...)
	}
	return out
}

// httpSendBody is the body of one request: the notification SendTx sends
// in the baseline.
func httpSendBody(i int) []byte {
	b, _ := json.Marshal(map[string]any{"notifier": notifierInApp, "key": fmt.Sprintf("http-%07d", i),
		"recipients": []string{recipientID(i%1000 + 1)}, "params": benchParams})
	return b
}

// measureHTTPSend times n POST /v1/notifications from conc clients, after
// enqueueWarmup requests, against a fresh database.
func measureHTTPSend(ctx context.Context, h *harness, n, conc int) (measurement, error) {
	db, err := h.freshDB(ctx, "httpsend")
	if err != nil {
		return measurement{}, err
	}
	defer db.drop()
	cfg, err := loadConfig(configOptions{DatabaseURL: db.URL})
	if err != nil {
		return measurement{}, err
	}
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	base, err := serveAPI(ctx, h, cfg, false, &closers)
	if err != nil {
		return measurement{}, err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * conc,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}}
	defer client.CloseIdleConnections()
	post := func(i int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/notifications", bytes.NewReader(httpSendBody(i)))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+adminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("POST /v1/notifications: %d %s", resp.StatusCode, body)
		}
		return nil
	}
	if err := lanes(enqueueWarmup, conc, func(i int) error { return post(n + i) }); err != nil {
		return measurement{}, fmt.Errorf("warm-up: %w", err)
	}
	return timeLanes(ctx, h, "httpsend", db.Name, n, conc, "requests", post)
}

// measureSendTxOne is the HTTP send row's baseline: n transactions, each
// one SendTx of the notification a request of measureHTTPSend sends, from
// conc goroutines on a pool of conc connections, after enqueueWarmup.
func measureSendTxOne(ctx context.Context, h *harness, n, conc int) (measurement, error) {
	db, pool, closeDB, err := h.openDB(ctx, "sendtx", int32(conc))
	if err != nil {
		return measurement{}, err
	}
	defer closeDB()
	cfg, err := loadConfig(configOptions{DatabaseURL: db.URL})
	if err != nil {
		return measurement{}, err
	}
	client, _ := notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg})
	send := func(i int) error {
		var nf notifyd.Notification
		var body struct {
			Notifier   string         `json:"notifier"`
			Key        string         `json:"key"`
			Recipients []string       `json:"recipients"`
			Params     map[string]any `json:"params"`
		}
		_ = json.Unmarshal(httpSendBody(i), &body)
		nf.Notifier, nf.Key, nf.Params = body.Notifier, body.Key, body.Params
		for _, r := range body.Recipients {
			nf.Recipients = append(nf.Recipients, notifyd.Recipient{ID: r})
		}
		_, _, err := sendCommitted(ctx, pool, client, nf, nil)
		return err
	}
	// The daemon of the HTTP side publishes its notifier catalog at start:
	// the same database state here.
	if err := server.PublishCatalog(ctx, pool, cfg, nil); err != nil {
		return measurement{}, err
	}
	if err := lanes(enqueueWarmup, conc, func(i int) error { return send(n + i) }); err != nil {
		return measurement{}, fmt.Errorf("warm-up: %w", err)
	}
	return timeLanes(ctx, h, "sendtx", db.Name, n, conc, "transactions", send)
}

// timeLanes times work(i) for i in [0, n) on conc goroutines.
func timeLanes(ctx context.Context, h *harness, scenario, dbName string, n, conc int, what string, work func(i int) error) (measurement, error) {
	h.waitQuiet(ctx)
	stopProf := h.prof.start(ctx, scenario, dbName, n, strings.TrimSuffix(what, "s"))
	cpu0 := h.cpu()
	start := time.Now()
	err := lanes(n, conc, work)
	elapsed := time.Since(start)
	cpu := h.cpu().sub(cpu0)
	stopProf()
	if err != nil {
		return measurement{}, err
	}
	return measurement{rate: float64(n) / elapsed.Seconds(), seconds: elapsed.Seconds(), cpu: cpu,
		note: fmt.Sprintf("%d %s, %d at once, %.2fs, %s", n, what, conc, elapsed.Seconds(), cpu)}, nil
}

// runClientCommand is the hook for the client packages' rows (enqueue from
// the Node and Python clients: "app INSERT + send" vs "app INSERT + one
// INSERT INTO river_job", same client, same connections): it runs cmd
// through sh with DATABASE_URL naming a fresh migrated database (the
// daemon's notifier catalog published, no workers running) and BENCH_CONC
// the concurrency, and reads the lines it prints of the forms
//
//	row <name> <measured> <baseline> <target>
//	fail <name> <what is missing, or what failed>
//
// (tx/s, the target a ratio), one per row, into the table; a fail line is a
// failed row with its reason, printed as well. Any other line is passed
// through.
func runClientCommand(ctx context.Context, h *harness, cmd string, conc int) []Result {
	db, err := h.freshDB(ctx, "clients")
	if err != nil {
		return []Result{errorResult("client packages", "tx/s", ">=", 0.7, "ratio", err)}
	}
	defer db.drop()
	cfg, err := loadConfig(configOptions{DatabaseURL: db.URL})
	if err != nil {
		return []Result{errorResult("client packages", "tx/s", ">=", 0.7, "ratio", err)}
	}
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	if _, err := serveAPI(ctx, h, cfg, false, &closers); err != nil { // publishes the catalog
		return []Result{errorResult("client packages", "tx/s", ">=", 0.7, "ratio", err)}
	}
	h.waitQuiet(ctx)
	c := exec.CommandContext(ctx, "sh", "-c", cmd)
	c.Env = append(os.Environ(), "DATABASE_URL="+db.URL, "BENCH_CONC="+strconv.Itoa(conc))
	c.Stderr = os.Stderr
	cpu0 := h.cpu()
	out, err := c.Output()
	cpu := h.cpu().sub(cpu0)
	if err != nil {
		return []Result{errorResult("client packages", "tx/s", ">=", 0.7, "ratio", fmt.Errorf("%s: %w", cmd, err))}
	}
	var rs []Result
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "fail" {
			reason := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "fail "+f[1]))
			fmt.Printf("  FAILED %s: %s\n", f[1], reason)
			rs = append(rs, errorResult(f[1], "tx/s", ">=", 0.7, "ratio", errors.New(reason)))
			continue
		}
		if len(f) != 5 || f[0] != "row" {
			if strings.TrimSpace(line) != "" {
				fmt.Println("  " + line)
			}
			continue
		}
		measured, err1 := strconv.ParseFloat(f[2], 64)
		baseline, err2 := strconv.ParseFloat(f[3], 64)
		target, err3 := strconv.ParseFloat(f[4], 64)
		if err1 != nil || err2 != nil || err3 != nil {
			rs = append(rs, errorResult(f[1], "tx/s", ">=", 0, "ratio", fmt.Errorf("unreadable row %q", line)))
			continue
		}
		r := ratioResult(f[1], "tx/s", measured, baseline, "same client, INSERT + river_job", "tx/s", ">=", target)
		r.CPU, r.Notes = cpu.use(), "from "+cmd
		rs = append(rs, r)
	}
	return rs
}
