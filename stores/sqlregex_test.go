package stores_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/internal/testing/pgtest"
	"github.com/notifyd/notifyd/sql/sqlregex"
)

// A pattern translated for PostgreSQL finds a match in exactly the strings Go's
// regexp does, through ~ and through SQL/JSON path's like_regex as the params
// check writes it.
func TestTranslatedPatternsMatchAsGoDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := pgtest.Tx(t)
	patterns := []string{`^[A-Z]{2}-[0-9]{1,8}$`, `(?i)^ab+c\.`, `a.c`, `(?s)a.c`, `^\d+$`, `\w+@\w+`, `^\s*$`,
		`[^a-z]`, `^(?:foo|bar)?baz$`, `x{2,}`, `^\p{Lu}`, `\$\^\.\*\[\]\(\)\{\}\|\\`, `[\-\]\\^]`, `^$`, `(?i)straße`,
		`a\z`, `\Aa`, `^a{256}$`, `b{2,300}c`, `[[:alpha:]]+[[:digit:]]`, `é+$`, `()`, `a|`, `.{3}$`}
	inputs := []string{"", "AB-123", "AB-1234567890", "ab-1", "abbc.", "ABBC.x", "xabc.", "a\nc", "abc", "123", "12a",
		"ada@example", "   ", " \n", "a", "baz", "foobaz", "foobarbaz", "xx", "x", "Édith", "édith", "$^.*[](){}|\\",
		"-", "]", "^", "STRASSE", "STRAßE", "straẞe", "ba", "a\n", "abc1", "éé", "日本語", "ab\n", strings.Repeat("a", 256), strings.Repeat("a", 257), strings.Repeat("b", 300) + "c", "b" + "c"}
	for _, p := range patterns {
		re := regexp.MustCompile(p)
		sql, err := sqlregex.Translate(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, in := range inputs {
			var tilde, path bool
			err := tx.QueryRow(ctx, `SELECT $1 ~ $2, to_jsonb($1::text) @@ ('$ like_regex ' || to_jsonb($2::text)::text || ' flag "s"')::jsonpath`,
				in, sql).Scan(&tilde, &path)
			if err != nil {
				t.Fatalf("%s (%s) on %q: %v", p, sql, in, err)
			}
			if want := re.MatchString(in); tilde != want || path != want {
				t.Errorf("%s (%s) on %q: ~ %v, like_regex %v, Go %v", p, sql, in, tilde, path, want)
			}
		}
	}
	for _, p := range []string{`\bword`, `(?m)^a`, `(?m)a$`} {
		if _, err := sqlregex.Translate(p); err == nil {
			t.Errorf("%s: translated, want an error", p)
		}
	}
}
