package main

import (
	"context"
	"errors"
	"fmt"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/notifyd/notifyd/server"
)

// OperatorTokenCommand is `notifyd token create|list|revoke`: the operator
// tokens scripts use for the admin API, managed on the database directly
// (for the first admin, before anyone can sign in).
type OperatorTokenCommand struct{ main *Main }

// Run runs the subcommand verb ("create", "list" or "revoke") with args.
// create prints the token alone on stdout: the only time it is shown.
func (c *OperatorTokenCommand) Run(ctx context.Context, verb string, args []string) error {
	var path, name, role, tenants string
	var ttl time.Duration
	fs := c.main.newFlagSet("token "+verb, &path)
	switch verb {
	case "create":
		fs.StringVar(&name, "name", "", "what the token is for (shown in lists)")
		fs.StringVar(&role, "role", "", "viewer, operator or admin (required)")
		fs.StringVar(&tenants, "tenants", "", "comma-separated tenants the token is confined to (default: every tenant)")
		fs.DurationVar(&ttl, "ttl", 0, "token lifetime (default: until revoked)")
	case "revoke":
		fs.Usage = func() { fmt.Fprintln(c.main.Stderr, "usage: notifyd token revoke [-config FILE] ID") }
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if verb == "revoke" && fs.NArg() != 1 {
		return errors.New("usage: notifyd token revoke [-config FILE] ID")
	}
	if verb != "revoke" && fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if verb == "create" && role == "" {
		return errors.New("-role is required: viewer, operator or admin")
	}
	if ttl < 0 {
		return errors.New("-ttl must be positive")
	}
	cfg, err := server.LoadConfig(path)
	if err != nil {
		return err
	}
	srv, err := server.Open(ctx, cfg, nil)
	if err != nil {
		return err
	}
	defer srv.Close()
	switch verb {
	case "create":
		spec := server.OperatorToken{Name: name, Role: role, Tenants: splitList(tenants)}
		if ttl > 0 {
			at := time.Now().Add(ttl)
			spec.ExpiresAt = &at
		}
		_, tok, err := srv.CreateOperatorToken(ctx, spec, cliActor())
		if err != nil {
			return err
		}
		fmt.Fprintln(c.main.Stdout, tok)
	case "list":
		toks, err := srv.ListOperatorTokens(ctx)
		if err != nil {
			return err
		}
		w := tabwriter.NewWriter(c.main.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tNAME\tROLE\tTENANTS\tCREATED BY\tEXPIRES\tLAST USED\tREVOKED")
		for _, t := range toks {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, orDash(strings.Join(t.Tenants, ",")),
				t.CreatedBy, timeOrDash(t.ExpiresAt), timeOrDash(t.LastUsedAt), timeOrDash(t.RevokedAt))
		}
		return w.Flush()
	case "revoke":
		t, err := srv.RevokeOperatorToken(ctx, fs.Arg(0), cliActor())
		if err != nil {
			return err
		}
		fmt.Fprintf(c.main.Stdout, "revoked %s at %s\n", t.ID, t.RevokedAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// cliActor names who ran a CLI command: "cli:<OS user>".
func cliActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "cli:" + u.Username
	}
	return "cli"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
