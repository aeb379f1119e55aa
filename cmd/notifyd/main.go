// Command notifyd is the notifyd daemon and its operator CLI.
//
//	notifyd run        the daemon: workers + HTTP API
//	notifyd migrate    apply notifyd's and River's migrations
//	notifyd check      validate a config file
//	notifyd send       enqueue a notification
//	notifyd token      mint a recipient token; token create|list|revoke: operator tokens
//	notifyd webhook-secret  print one webhook destination's signing secret
//	notifyd deliveries print a notification's ledger
//	notifyd retry      re-drive failed deliveries
//	notifyd dev        the embedded default: private Postgres, captured email
//	notifyd preview    render a notifier's message on one channel
//	notifyd gen types  write the notifiers' params types (TypeScript, Python, Go)
//	notifyd version    print the version, commit and Go toolchain
//
// Every command takes -config (default config.yaml, then $NOTIFYD_CONFIG).
// main only maps errors to exit codes; each command is a small type with a Run
// method, the way Litestream's CLI is built.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// A second signal exits at once: NotifyContext stops relaying after the
	// first, so restore the default behaviour when ctx is cancelled.
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := (&Main{Stdout: os.Stdout, Stderr: os.Stderr}).Run(ctx, os.Args[1:])
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case errors.Is(err, errUsage):
		if msg := err.Error(); msg != errUsage.Error() {
			fmt.Fprintln(os.Stderr, "notifyd:", strings.TrimSuffix(msg, ": "+errUsage.Error()))
		}
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "notifyd:", err)
		os.Exit(1)
	}
}

// errUsage is returned for a missing or unknown command; main prints usage
// with it and exits 2.
var errUsage = errors.New("usage: notifyd <command> [flags]")

const usage = `usage: notifyd <command> [flags]

commands:
  run         run the daemon (workers + HTTP API)
  migrate     apply notifyd's and River's migrations (idempotent)
  check       validate a config file
  send        enqueue a notification
  token       print a recipient token (-recipient ID)
  token create|list|revoke  manage operator tokens for the admin API (-role viewer|operator|admin)
  webhook-secret  print the signing secret of a notifier's webhook (-notifier N) or a recipient's (-recipient ID)
  deliveries  print a notification's delivery ledger
  retry       re-drive failed deliveries (-status failed -since 1h)
  dev         run with a private PostgreSQL and a captured-email page
  preview     render a notifier's message on one channel (-notifier N -channel C)
  vapid-keys  print a new VAPID key pair for channels.web_push
  gen types   write every notifier's params type for a language (-lang ts|python|go [-o FILE])
  version     print the version, the commit built from and the Go toolchain

Every command takes -config FILE (default config.yaml, then $NOTIFYD_CONFIG).`

// Main is the CLI; Stdout and Stderr are where commands print.
type Main struct {
	Stdout io.Writer
	Stderr io.Writer
}

// Run dispatches args[0] to its command.
func (m *Main) Run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return (&RunCommand{main: m}).Run(ctx, rest)
	case "migrate":
		return (&MigrateCommand{main: m}).Run(ctx, rest)
	case "check":
		return (&CheckCommand{main: m}).Run(ctx, rest)
	case "send":
		return (&SendCommand{main: m}).Run(ctx, rest)
	case "token":
		return (&TokenCommand{main: m}).Run(ctx, rest)
	case "webhook-secret":
		return (&WebhookSecretCommand{main: m}).Run(ctx, rest)
	case "deliveries":
		return (&DeliveriesCommand{main: m}).Run(ctx, rest)
	case "retry":
		return (&RetryCommand{main: m}).Run(ctx, rest)
	case "dev":
		return (&DevCommand{main: m}).Run(ctx, rest)
	case "preview":
		return (&PreviewCommand{main: m}).Run(ctx, rest)
	case "vapid-keys":
		return (&VAPIDKeysCommand{main: m}).Run(ctx, rest)
	case "gen":
		return (&GenCommand{main: m}).Run(ctx, rest)
	case "version", "-version", "--version":
		return (&VersionCommand{main: m}).Run(ctx, rest)
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(m.Stdout, usage)
		return nil
	}
	return fmt.Errorf("unknown command %q: %w", cmd, errUsage)
}

// newFlagSet returns a flag set for cmd with the common -config flag.
func (m *Main) newFlagSet(cmd string, configPath *string) *flag.FlagSet {
	fs := flag.NewFlagSet("notifyd "+cmd, flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	def := "config.yaml"
	if env := os.Getenv("NOTIFYD_CONFIG"); env != "" {
		def = env
	}
	fs.StringVar(configPath, "config", def, "config file (default config.yaml, then $NOTIFYD_CONFIG)")
	return fs
}
