package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPreviewAndCheckWithCatalogs: preview renders t in the locale asked
// for (its parents, then the default, filling in), and check prints the
// keys another locale lacks as a warning.
func TestPreviewAndCheckWithCatalogs(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, `locales: locales
notifiers:
  comment.created:
    example: {author_name: Ada, count: 5}
    channels:
      in_app: {title: '{{t "comment.created.in_app.title"}}', body: '{{t "comment.created.in_app.body"}}'}
`)
	dir := filepath.Join(filepath.Dir(cfg), "locales")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{
		"en.yaml": "comment.created.in_app:\n  title: '{author_name}: {count, plural, one {# comment} other {# comments}}'\n  body: 'Open it'\n",
		"pl.yaml": "comment.created.in_app:\n  title: '{author_name}: {count, plural, one {# komentarz} few {# komentarze} many {# komentarzy} other {# komentarza}}'\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err := run(t, "preview", "-config", cfg, "-notifier", "comment.created", "-channel", "in_app", "-locale", "pl-PL")
	if err != nil || !strings.HasPrefix(out, "title:\nAda: 5 komentarzy\n\nbody:\nOpen it\n") {
		t.Fatalf("preview in pl = %q, %v", out, err)
	}
	out, _, err = run(t, "preview", "-config", cfg, "-notifier", "comment.created", "-channel", "in_app")
	if err != nil || !strings.HasPrefix(out, "title:\nAda: 5 comments\n") {
		t.Fatalf("preview in the default locale = %q, %v", out, err)
	}
	out, _, err = run(t, "check", "-dev", "-config", cfg)
	if err != nil || !strings.Contains(out, "warning: locales: "+filepath.Join(dir, "pl.yaml")+": comment.created.in_app.body: 1 of 2 keys of en are missing") {
		t.Fatalf("check = %q, %v", out, err)
	}
}
