package stores

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Function definitions are repeatable migrations, as Flyway's are: each file
// of sql/functions (notifysql.FunctionsDir) is the current definition of one
// function, and Migrate runs the files whose text this database has not run
// yet, after the versioned migrations, all in one transaction. Versioned
// migrations change tables; a release that changes a function changes its
// file and nothing else.
//
// notify_function_files records, per function file, the checksum of every
// text that was ever applied. A file is applied when its checksum is not among them, so
// a previous release's replica that migrates during a rolling upgrade (its
// files were all applied before) changes nothing, and the newer definitions
// stay. A change back to an earlier text must therefore differ from it (a
// comment will do).
const createFunctionsTableSQL = `
CREATE TABLE IF NOT EXISTS notify_function_files (
    name       text NOT NULL,
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, sha256)
)`

const appliedFunctionsSQL = `SELECT name, sha256 FROM notify_function_files`

const recordFunctionSQL = `
INSERT INTO notify_function_files (name, sha256) VALUES ($1, $2)
ON CONFLICT (name, sha256) DO NOTHING`

// functionFile is one file of sql/functions.
type functionFile struct {
	name string // the function's name: the file's name without .sql
	text string
	sum  string // hex SHA-256 of text
}

// readFunctionFiles returns fsys's <name>.sql files in name order.
func readFunctionFiles(fsys fs.FS) ([]functionFile, error) {
	paths, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("function files: %w", err)
	}
	slices.Sort(paths)
	files := make([]functionFile, 0, len(paths))
	for _, path := range paths {
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return nil, fmt.Errorf("function files: %w", err)
		}
		sum := sha256.Sum256(b)
		files = append(files, functionFile{
			name: strings.TrimSuffix(path, ".sql"),
			text: string(b),
			sum:  hex.EncodeToString(sum[:]),
		})
	}
	return files, nil
}

// appliedFunctions reads the checksums applied so far, by file name; none
// when the table does not exist yet.
func appliedFunctions(ctx context.Context, db DB) (map[string]map[string]bool, error) {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('notify_function_files') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, err
	}
	applied := map[string]map[string]bool{}
	if !exists {
		return applied, nil
	}
	rows, err := db.Query(ctx, appliedFunctionsSQL)
	if err != nil {
		return nil, err
	}
	var name, sum string
	_, err = pgx.ForEachRow(rows, []any{&name, &sum}, func() error {
		if applied[name] == nil {
			applied[name] = map[string]bool{}
		}
		applied[name][sum] = true
		return nil
	})
	return applied, err
}

// applyFunctions runs, in one transaction on db, every file of fsys whose
// text has not been applied to the database before, and records it. Bodies
// are not checked at creation (check_function_bodies off, as pg_dump
// restores), so files apply in name order whatever calls what; a body that
// is wrong fails when it first runs, which the tests do. It returns the names
// it applied.
func applyFunctions(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, fsys fs.FS) ([]string, error) {
	files, err := readFunctionFiles(fsys)
	if err != nil {
		return nil, err
	}
	var names []string
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, createFunctionsTableSQL); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "REVOKE ALL ON notify_function_files FROM PUBLIC"); err != nil {
			return err
		}
		applied, err := appliedFunctions(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SET LOCAL check_function_bodies = off"); err != nil {
			return err
		}
		for _, f := range files {
			if applied[f.name][f.sum] {
				continue
			}
			if _, err := tx.Exec(ctx, f.text); err != nil {
				return fmt.Errorf("sql/functions/%s.sql: %w", f.name, err)
			}
			if _, err := tx.Exec(ctx, recordFunctionSQL, f.name, f.sum); err != nil {
				return err
			}
			names = append(names, f.name)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrate: functions: %w", err)
	}
	return names, nil
}

// pendingFunctions names the files of fsys whose text the database has never
// applied.
func pendingFunctions(ctx context.Context, db DB, fsys fs.FS) ([]string, error) {
	files, err := readFunctionFiles(fsys)
	if err != nil {
		return nil, err
	}
	applied, err := appliedFunctions(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("check migrations: functions: %w", err)
	}
	var pending []string
	for _, f := range files {
		if !applied[f.name][f.sum] {
			pending = append(pending, f.name)
		}
	}
	return pending, nil
}

func logAppliedFunctions(ctx context.Context, logger *slog.Logger, names []string) {
	for _, name := range names {
		logger.InfoContext(ctx, "applied function", "source", "notifyd", "function", name)
	}
}
