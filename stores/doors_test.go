package stores_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// writeDoors lists the writes the SQL API offers and the one door each goes
// through: the notify_* function that checks its input and writes it. The
// HTTP API, the Go API and the CLI call the stores functions that run these
// functions; no Go code writes the tables behind them with a statement of
// its own, which would skip the checks applications get from SQL.
var writeDoors = []struct {
	write    string
	function string
	// raw matches a statement that writes the same thing directly
	// (lower case, whitespace folded to one space).
	raw []string
}{
	{"subscribe", "notify_subscribe", []string{`insert into notify_subscriptions\b`, `update notify_subscriptions\b`}},
	{"unsubscribe", "notify_unsubscribe", []string{`delete from notify_subscriptions\b`}},
	{"put recipient", "notify_put_recipient", []string{`insert into notify_recipients\b`, `update notify_recipients\b`}},
	{"send", "notify_send", []string{`insert into notify_notifications\b`}},
	{"cancel", "notify_cancel", []string{`update notify_notifications\b[^;]*\bstatus = 'cancelled'`}},
}

// notDoors are the Go statements that write those tables and are none of the
// SQL API's writes, each with why. The test fails for a statement not listed
// here and for an entry that no longer matches one, so the list stays true.
var notDoors = map[string]string{
	"stores/erase.go eraseRecipientSQL":       "erasing a recipient deletes its profile and subscriptions (DELETE /v1/recipients/{id}), not an unsubscribe",
	"stores/tenants.go startTenantErasureSQL": "erasing a tenant cancels its notifications not yet fanned out, whatever their keys",
	"stores/deliveries.go markWebhookGoneSQL": "the daemon records that a webhook answered 410 Gone; no API writes webhook_gone_at",
}

// TestEveryWriteHasOneDoor scans the module's Go code (tests and the bench
// harness, which seeds its databases directly, aside) for statements that
// write what a notify_* function writes.
func TestEveryWriteHasOneDoor(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..")
	type statement struct{ where, sql string }
	var statements []statement
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "bench" || rel == "node_modules" || strings.HasPrefix(d.Name(), ".") && rel != "." ||
				d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for name, sql := range stringLiterals(t, rel, src) {
			statements = append(statements, statement{rel + " " + name, sql})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(statements) < 100 {
		t.Fatalf("read %d string literals: the walk missed the module", len(statements))
	}

	space := regexp.MustCompile(`\s+`)
	used := map[string]bool{}
	for _, door := range writeDoors {
		called := false
		call := regexp.MustCompile(`\b(select|from) ` + door.function + `\(`)
		for _, s := range statements {
			sql := space.ReplaceAllString(strings.ToLower(s.sql), " ")
			if strings.HasPrefix(s.where, "stores/") && call.MatchString(sql) {
				called = true
			}
			for _, raw := range door.raw {
				if !regexp.MustCompile(raw).MatchString(sql) {
					continue
				}
				if _, ok := notDoors[s.where]; ok {
					used[s.where] = true
					continue
				}
				t.Errorf("%s writes what %s writes (%s) without it: call the function, the one door of the write", s.where, door.function, door.write)
			}
		}
		if !called {
			t.Errorf("no statement in stores/ runs %s: the %s write has no door from Go", door.function, door.write)
		}
		if _, err := os.Stat(filepath.Join(root, "sql", "functions", door.function+".sql")); err != nil {
			t.Errorf("the %s write's door: %v", door.write, err)
		}
	}
	for where := range notDoors {
		if !used[where] {
			t.Errorf("notDoors lists %s, which writes none of the doors' tables (or is gone): drop it", where)
		}
	}
}

// stringLiterals returns the string literals of a Go file, keyed by the
// constant or variable they are declared as ("" and a line for others).
func stringLiterals(t *testing.T, name string, src []byte) map[string]string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	named := map[*ast.BasicLit]bool{}
	add := func(key string, lit *ast.BasicLit) {
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			return
		}
		if prev, ok := out[key]; ok {
			s = prev + "\n" + s
		}
		out[key] = s
	}
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, v := range spec.Values {
			if i >= len(spec.Names) {
				break
			}
			ast.Inspect(v, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					named[lit] = true
					add(spec.Names[i].Name, lit)
				}
				return true
			})
		}
		return true
	})
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && !named[lit] {
			add("line "+strconv.Itoa(fset.Position(lit.Pos()).Line), lit)
		}
		return true
	})
	return out
}
