package server

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notifyd/notifyd/config"
	"github.com/notifyd/notifyd/stores"
)

// CheckAudiences prepares every notifier's audience query against pool's
// database, as the daemon's role with the daemon's search_path (the pool of
// OpenPool), without running it, and returns a *config.Errors naming the
// notifier's key and line for each problem: a query PostgreSQL refuses (a
// missing table or column, a syntax error, a table the role may not read,
// a placeholder whose type it cannot tell), no column id, an id or reason of
// a type that is not a recipient id or a reason, or a placeholder of a type
// the named param's schema cannot give. nil: every query would run.
// An error that is not about a query (the database is unreachable) is
// returned as it is.
func CheckAudiences(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var errs []*config.Error
	add := func(path, format string, args ...any) {
		errs = append(errs, &config.Error{File: cfg.Path, Line: cfg.Line(path), Path: path,
			Message: fmt.Sprintf(format, args...)})
	}
	for _, name := range cfg.NotifierNames() {
		nf, _ := cfg.Notifier(name)
		if nf.Audience == nil {
			continue
		}
		base := "notifiers." + name + ".audience"
		shape, err := stores.DescribeAudience(ctx, conn.Conn(), nf.Audience.Query)
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe):
			add(base+".query", "the database refuses the query: %s", pe.Error())
			continue
		case err != nil:
			return fmt.Errorf("check the audience of %s: %w", name, err)
		}
		checkAudienceShape(nf, shape, base, add)
	}
	if len(errs) == 0 {
		return nil
	}
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	return &config.Errors{Errors: errs}
}

// checkAudienceShape checks what PostgreSQL said about nf's audience query.
func checkAudienceShape(nf *config.Notifier, shape *stores.AudienceShape, base string,
	add func(path, format string, args ...any)) {
	var cols []string
	for _, c := range shape.Columns {
		cols = append(cols, c.Name+" "+c.Type)
	}
	found := map[string]bool{}
	for _, c := range shape.Columns {
		if found[c.Name] {
			add(base+".query", "the query returns two columns named %s", c.Name)
		}
		found[c.Name] = true
		switch c.Name {
		case "id":
			if !idType(c.Type) {
				add(base+".query", "column id is %s: want a recipient id, text, an integer or a uuid (one recipient per row)", c.Type)
			}
		case "reason":
			if !textType(c.Type) {
				add(base+".query", "column reason is %s: want text", c.Type)
			}
		}
	}
	if !found["id"] {
		add(base+".query", "the query returns no column id (its columns: %s): name the recipient id column id, as in SELECT user_id AS id",
			strings.Join(cols, ", "))
	}
	if len(shape.Params) != len(nf.Audience.Args) {
		add(base+".args", "the query has %d placeholder(s) ($1…), args names %d param(s)", len(shape.Params), len(nf.Audience.Args))
	}
	props, _ := nf.Params["properties"].(map[string]any)
	for i, pgType := range shape.Params {
		if i >= len(nf.Audience.Args) {
			break
		}
		arg := nf.Audience.Args[i]
		prop, _ := props[arg].(map[string]any)
		jsonType, _ := prop["type"].(string)
		if jsonType != "" && !paramFits(jsonType, pgType) {
			add(fmt.Sprintf("%s.args[%d]", base, i), "param %s is a JSON %s, but the query reads $%d as %s", arg, jsonType, i+1, pgType)
		}
	}
}

func textType(t string) bool {
	return t == "text" || t == "name" || t == "citext" || strings.HasPrefix(t, "character")
}

func idType(t string) bool {
	return textType(t) || t == "bigint" || t == "integer" || t == "smallint" || t == "uuid" || t == "numeric"
}

// paramFits reports whether a param of JSON Schema type jsonType, bound as
// text (stores.AudienceArg), can be read by PostgreSQL as pgType.
func paramFits(jsonType, pgType string) bool {
	if textType(pgType) || pgType == "unknown" {
		return jsonType != "object" && jsonType != "array"
	}
	array := strings.HasSuffix(pgType, "[]")
	switch jsonType {
	case "array":
		return array
	case "object":
		return pgType == "jsonb" || pgType == "json"
	case "integer":
		return !array && (pgType == "bigint" || pgType == "integer" || pgType == "smallint" || pgType == "numeric" ||
			pgType == "real" || pgType == "double precision" || pgType == "jsonb" || pgType == "json")
	case "number":
		return !array && (pgType == "numeric" || pgType == "real" || pgType == "double precision" ||
			pgType == "jsonb" || pgType == "json")
	case "boolean":
		return pgType == "boolean" || pgType == "jsonb" || pgType == "json"
	case "string":
		return !array // any scalar type reads from a string (a uuid, a date, a number written as text)
	}
	return true
}
