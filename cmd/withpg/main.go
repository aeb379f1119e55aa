// Command withpg runs a command against a throwaway PostgreSQL server:
//
//	go run ./cmd/withpg -- go test ./...
//
// It starts a tuned private cluster (internal/pgcluster) in a temporary
// directory, creates the database notifyd, sets TEST_DATABASE_URL to it, runs
// the command, then stops the cluster, deletes the directory and exits with
// the command's exit status (128+n when a signal n ended it). SIGINT and
// SIGTERM are passed on to the command. When the PostgreSQL server programs
// are missing and withpg runs as root, it installs them with apt-get.
//
// With TEST_DATABASE_URL already set, withpg only runs the command.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/notifyd/notifyd/internal/pgcluster"
)

const envURL = "TEST_DATABASE_URL"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withpg [--] command [argument ...]")
		return 2
	}

	// Signals are caught from the start, so that one arriving while the
	// cluster starts still gets the cluster stopped.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	r := &runner{sigs: sigs}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.forwardSignals(cancel)

	if os.Getenv(envURL) != "" {
		return r.runCommand(args, nil)
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("tool", "withpg")
	if err := pgcluster.EnsureInstalled(ctx, logger); err != nil {
		fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		return r.failureCode()
	}
	dir, err := os.MkdirTemp("", "notifyd-withpg-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)

	began := time.Now()
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Tuned: true, Logger: logger})
	if err != nil {
		fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		return r.failureCode()
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		}
	}()
	if err := cluster.EnsureDatabase(ctx, "notifyd"); err != nil {
		fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		return r.failureCode()
	}
	url := cluster.URL("notifyd")
	fmt.Fprintf(os.Stderr, "withpg: PostgreSQL ready in %s (%s)\nwithpg: %s=%s\n",
		time.Since(began).Round(time.Millisecond), cluster.Settings(), envURL, url)
	return r.runCommand(args, []string{envURL + "=" + url})
}

// runner runs the command and passes signals on to it.
type runner struct {
	sigs chan os.Signal

	mu          sync.Mutex
	proc        *os.Process
	interrupted bool
}

// forwardSignals passes each signal to the running command; before the
// command runs, a signal cancels the start instead.
func (r *runner) forwardSignals(cancelStart context.CancelFunc) {
	for sig := range r.sigs {
		r.mu.Lock()
		r.interrupted = true
		proc := r.proc
		r.mu.Unlock()
		if proc != nil {
			_ = proc.Signal(sig)
		} else {
			cancelStart()
		}
	}
}

// failureCode is the exit status for a failure before the command ran: 130
// (as for SIGINT) when a signal caused it.
func (r *runner) failureCode() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.interrupted {
		return 130
	}
	return 1
}

func (r *runner) runCommand(args, extraEnv []string) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), extraEnv...)
	r.mu.Lock()
	if r.interrupted {
		r.mu.Unlock()
		return 130
	}
	err := cmd.Start()
	if err == nil {
		r.proc = cmd.Process
	}
	r.mu.Unlock()
	if err != nil {
		fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		return 127
	}
	err = cmd.Wait()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exitErr):
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return exitErr.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "withpg: %v\n", err)
		return 1
	}
}
