package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/notifyd/notifyd"
)

// rssTimeout bounds one fan-out of the RSS scenario.
const rssTimeout = 15 * time.Minute

// runRSS is scenario 6: the notifyd binary, built from this tree and run as
// a subprocess (`notifyd migrate`, then `notifyd run`) against the bench
// cluster, fans out one in_app notification to sizes[mode] recipients; its
// peak RSS is VmHWM from /proc/<pid>/status. The modes are "topic" (a topic
// with that many subscribers), "inline" (the list travels in the
// notification row: the harder case for memory) and "audience" (an audience
// query over the application's table returns them).
func runRSS(ctx context.Context, h *harness, bin string, sizes map[string]int) []Result {
	var out []Result
	for _, mode := range []string{"topic", "inline", "audience"} {
		n, ok := sizes[mode]
		if !ok || n <= 0 {
			continue
		}
		name := fmt.Sprintf("daemon peak RSS, %s %s", mode, shortCount(n))
		m, err := measureRSS(ctx, h, bin, mode, n)
		if err != nil {
			out = append(out, errorResult(name, "MB", "<=", 100, "absolute", err))
			continue
		}
		fmt.Printf("  %s: VmHWM %.0f MB (%s)\n", name, m.rate, m.note)
		// The daemon is a subprocess: its CPU is in the notes, not in m.cpu.
		r := absoluteResult(name, "MB", m.rate, "<=", 100)
		r.N, r.Seconds, r.Notes = n, m.seconds, m.note
		out = append(out, r)
	}
	return out
}

// shortCount writes 1000000 as 1M and 200000 as 200k.
func shortCount(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// buildDaemon builds cmd/notifyd into dir and returns the binary's path.
func buildDaemon(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "notifyd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/notifyd")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/notifyd: %w", err)
	}
	return bin, nil
}

func measureRSS(ctx context.Context, h *harness, bin, mode string, n int) (measurement, error) {
	db, pool, closeDB, err := h.openDB(ctx, "rss_"+mode, 4)
	if err != nil {
		return measurement{}, err
	}
	defer closeDB()
	if err := insertRecipients(ctx, pool, n); err != nil {
		return measurement{}, err
	}
	nf := notifyd.Notification{Notifier: notifierInApp, Key: "rss-" + mode, Params: benchParams}
	switch mode {
	case "topic":
		if err := insertSubscribers(ctx, pool, benchTopic, n); err != nil {
			return measurement{}, err
		}
		nf.Topics = []string{benchTopic}
	case "audience":
		if err := insertWatchers(ctx, pool, n); err != nil {
			return measurement{}, err
		}
		nf.Notifier = notifierAudience
	default:
		nf.Recipients = inlineRecipients(n)
	}
	if err := analyze(ctx, pool); err != nil {
		return measurement{}, err
	}
	cfgPath := filepath.Join(h.dir, "rss-"+mode+".yaml")
	if err := os.WriteFile(cfgPath, []byte(configYAML(configOptions{DatabaseURL: db.URL})), 0o600); err != nil {
		return measurement{}, err
	}
	migrate := exec.CommandContext(ctx, bin, "migrate", "-config", cfgPath)
	if out, err := migrate.CombinedOutput(); err != nil {
		return measurement{}, fmt.Errorf("notifyd migrate: %w\n%s", err, out)
	}
	p, err := startSubprocess(ctx, bin, cfgPath)
	if err != nil {
		return measurement{}, err
	}
	defer p.stop()
	time.Sleep(300 * time.Millisecond)
	idle, _ := readProcStatus(p.cmd.Process.Pid)
	_, ticks0, _ := procStat(p.cmd.Process.Pid)

	cfg, err := loadConfig(configOptions{DatabaseURL: db.URL})
	if err != nil {
		return measurement{}, err
	}
	client, _ := notifyd.NewClient(pool, notifyd.ClientConfig{Config: cfg})
	id, committed, err := sendCommitted(ctx, pool, client, nf, nil)
	if err != nil {
		return measurement{}, err
	}
	var peakRSS int64
	done, err := waitUntil(ctx, 50*time.Millisecond, rssTimeout, func() (bool, error) {
		if st, err := readProcStatus(p.cmd.Process.Pid); err == nil {
			peakRSS = max(peakRSS, st.rssKB)
		}
		select {
		case <-p.exited:
			return false, fmt.Errorf("notifyd exited during the fan-out: %v\n%s", p.err, p.tail())
		default:
		}
		status, msg, err := notificationStatus(ctx, pool, id)
		if err != nil {
			return false, err
		}
		if status == string(notifyd.NotificationRejected) {
			return false, fmt.Errorf("notification rejected: %s", msg)
		}
		return status == string(notifyd.NotificationFannedOut), nil
	})
	if err != nil {
		return measurement{}, err
	}
	st, err := readProcStatus(p.cmd.Process.Pid)
	if err != nil {
		return measurement{}, err
	}
	_, ticks1, _ := procStat(p.cmd.Process.Pid)
	elapsed := done.Sub(committed)
	inbox, err := count(ctx, pool, `SELECT count(*) FROM notify_inbox WHERE notification_id = $1`, id)
	if err != nil {
		return measurement{}, err
	}
	if inbox != n {
		return measurement{}, fmt.Errorf("fanned out, but %d inbox items for %d recipients", inbox, n)
	}
	return measurement{rate: float64(st.hwmKB) / 1024, seconds: elapsed.Seconds(),
		note: fmt.Sprintf("%d %s recipients fanned out in %.1fs (%s recip/s), RSS idle %.0f MB, sampled peak %.0f MB, daemon cpu %.1fs",
			n, mode, elapsed.Seconds(), formatNumber(float64(n)/elapsed.Seconds()), float64(idle.rssKB)/1024,
			float64(peakRSS)/1024, float64(ticks1-ticks0)/clockTick)}, nil
}

// subprocess is a running `notifyd run`.
type subprocess struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error

	mu  sync.Mutex
	log []string // the last lines of its stderr
}

// startSubprocess runs `notifyd run` and waits for its "notifyd running" line.
func startSubprocess(ctx context.Context, bin, cfgPath string) (*subprocess, error) {
	cmd := exec.Command(bin, "run", "-config", cfgPath, "-log-level", "info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &subprocess{cmd: cmd, exited: make(chan struct{})}
	running := make(chan struct{})
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		var once sync.Once
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log = append(p.log, line)
			if len(p.log) > 20 {
				p.log = p.log[1:]
			}
			p.mu.Unlock()
			if strings.Contains(line, "notifyd running") {
				once.Do(func() { close(running) })
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-scanned
		p.err = cmd.Wait()
		close(p.exited)
	}()
	select {
	case <-running:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("notifyd run exited: %v\n%s", p.err, p.tail())
	case <-time.After(time.Minute):
		p.stop()
		return nil, errors.New("notifyd run did not start within a minute")
	case <-ctx.Done():
		p.stop()
		return nil, ctx.Err()
	}
}

func (p *subprocess) tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

// stop sends SIGTERM (the daemon drains) and kills it after 30 s.
func (p *subprocess) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

type procStatus struct {
	rssKB, hwmKB int64
}

// readProcStatus reads VmRSS and VmHWM (peak RSS) of pid.
func readProcStatus(pid int) (procStatus, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procStatus{}, err
	}
	var st procStatus
	for _, line := range strings.Split(string(b), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			continue
		}
		v, _ := strconv.ParseInt(f[0], 10, 64)
		switch key {
		case "VmRSS":
			st.rssKB = v
		case "VmHWM":
			st.hwmKB = v
		}
	}
	return st, nil
}
