package sql_test

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	notifysql "github.com/notifyd/notifyd/sql"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// installedDefinitions returns the definition of every notify_* function
// (pg_get_functiondef, keyed by its signature) and view (pg_get_viewdef) in
// the connection's current schema.
const installedDefinitions = `
SELECT p.oid::regprocedure::text AS object, p.proname AS name, pg_get_functiondef(p.oid) AS definition
FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'notify\_%'
UNION ALL
SELECT 'view ' || v.viewname, v.viewname, v.definition
FROM pg_views v
WHERE v.schemaname = current_schema() AND v.viewname LIKE 'notify\_%'
ORDER BY 1`

type definition struct {
	name string // the function's or view's name, which names its file
	text string
}

func definitions(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) (map[string]definition, error) {
	rows, err := q.Query(ctx, installedDefinitions)
	if err != nil {
		return nil, fmt.Errorf("read installed definitions: %w", err)
	}
	defs := map[string]definition{}
	var object string
	var d definition
	_, err = pgx.ForEachRow(rows, []any{&object, &d.name, &d.text}, func() error {
		defs[object] = d
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read installed definitions: %w", err)
	}
	return defs, nil
}

// functionFiles returns sql/functions/*.sql by the name each file is for.
func functionFiles(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := fs.WalkDir(notifysql.FunctionsDir(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name, ok := strings.CutSuffix(path, ".sql")
		if !ok || strings.Contains(name, "/") {
			return fmt.Errorf("sql/functions/%s: want only <name>.sql files", path)
		}
		b, err := fs.ReadFile(notifysql.FunctionsDir(), path)
		if err != nil {
			return err
		}
		files[name] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// Every function and view a migrated database has comes from one file,
// sql/functions/<name>.sql, holding its current definition: running the file
// on a freshly migrated database changes nothing (the migrate step applies
// the files after the versioned migrations), and no function is installed
// without a file.
func TestFunctionFilesAreTheInstalledDefinitions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewDB(t)
	installed, err := definitions(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	files := functionFiles(t)

	installedNames := map[string]bool{}
	for object, d := range installed {
		installedNames[d.name] = true
		if _, ok := files[d.name]; !ok {
			t.Errorf("%s is installed but sql/functions/%s.sql does not exist: add its current definition", object, d.name)
		}
	}
	for name := range files {
		if !installedNames[name] {
			t.Errorf("sql/functions/%s.sql: no function or view %s is installed by the migrations", name, name)
		}
	}

	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !installedNames[name] {
			continue
		}
		if err := checkFile(ctx, pool, name, files[name], installed); err != nil {
			t.Error(err)
		}
	}
}

// checkFile runs the file in a transaction it rolls back, and reports every
// installed definition the file changed, added or removed.
func checkFile(ctx context.Context, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, name, text string, installed map[string]definition) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, text); err != nil {
		return fmt.Errorf("sql/functions/%s.sql does not run on the migrated database: %w", name, err)
	}
	after, err := definitions(ctx, tx)
	if err != nil {
		return err
	}
	var problems []string
	objects := make([]string, 0, len(after))
	for object := range after {
		objects = append(objects, object)
	}
	for object := range installed {
		if _, ok := after[object]; !ok {
			objects = append(objects, object)
		}
	}
	sort.Strings(objects)
	objects = slices.Compact(objects)
	for _, object := range objects {
		before, was := installed[object]
		now, is := after[object]
		switch {
		case !was:
			problems = append(problems, fmt.Sprintf("it creates %s, which the migrations do not install", object))
		case !is:
			problems = append(problems, fmt.Sprintf("it removes %s", object))
		case before.text != now.text:
			problems = append(problems, fmt.Sprintf("it changes %s:\n%s", object, lineDiff(before.text, now.text)))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("sql/functions/%s.sql is not the definition the migrations installed: %s",
			name, strings.Join(problems, "\n"))
	}
	return nil
}

// lineDiff shows where want (installed) and got (after running the file)
// part: the first differing line with two lines of context either side.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(w) && i < len(g) && w[i] == g[i] {
		i++
	}
	var b strings.Builder
	for j := max(0, i-2); j < i; j++ {
		fmt.Fprintf(&b, "    %4d   %s\n", j+1, w[j])
	}
	for j := i; j < min(len(w), i+3); j++ {
		fmt.Fprintf(&b, "    %4d - %s\n", j+1, w[j])
	}
	for j := i; j < min(len(g), i+3); j++ {
		fmt.Fprintf(&b, "    %4d + %s\n", j+1, g[j])
	}
	b.WriteString("    (- installed by the migrations, + after running the file)")
	return b.String()
}

// lastRestatingMigration is the last versioned migration that created or
// replaced a function itself. Since function files became repeatable
// migrations, a versioned migration changes tables only.
const lastRestatingMigration = 30

func TestNewMigrationsChangeTablesOnly(t *testing.T) {
	t.Parallel()
	createFunction := regexp.MustCompile(`(?i)\bcreate\s+(or\s+replace\s+)?(function|procedure)\b`)
	err := fs.WalkDir(notifysql.MigrationsDir(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		v, err := strconv.Atoi(strings.SplitN(path, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("sql/migrations/%s: no version number: %w", path, err)
		}
		if v <= lastRestatingMigration {
			return nil
		}
		b, err := fs.ReadFile(notifysql.MigrationsDir(), path)
		if err != nil {
			return err
		}
		if loc := createFunction.FindIndex(b); loc != nil {
			t.Errorf("sql/migrations/%s creates a function (%q): change sql/functions/<name>.sql instead; the migrate step applies it",
				path, b[loc[0]:loc[1]])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
