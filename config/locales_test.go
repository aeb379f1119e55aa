package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree writes files (path -> content) under a new directory and
// returns the config file's path.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "notifyd.yaml")
}

// TestCatalogCheckedAtLoad: every class of catalog problem is reported by
// Load (what `notifyd check` runs) with the catalog file and the key; a
// key another locale lacks is a warning, not an error.
func TestCatalogCheckedAtLoad(t *testing.T) {
	t.Parallel()
	path := writeTree(t, map[string]string{
		"notifyd.yaml": "locales: locales\ndigest:\n  subject: '{{t \"digest.subject\"}} {{t \"digest.gone\"}}'\n",
		"locales/en.yaml": `digest:
  subject: "{Count, plural, one {# new notification} other {# new notifications}}"
  greeting: "Hello {name}"
  footer: "Bye"
`,
		"locales/pl.yaml": `digest:
  subject: "{Count, plural, one {# nowe powiadomienie} other {# nowych powiadomień}}"
  greeting: "Cześć {imie}"
  footer: "Pa"
`,
		"locales/fr.yaml": "digest:\n  subject: \"{Count, plural, one {# notification} other {# notifications}}\"\n",
	})
	_, err := Load(path)
	if err == nil {
		t.Fatal("loaded")
	}
	dir := filepath.Dir(path)
	for _, want := range []string{
		filepath.Join(dir, "locales/en.yaml") + ": digest.gone: used by a template but missing in the default locale en",
		filepath.Join(dir, "locales/pl.yaml") + ": digest.subject: the plural of {Count} lacks the few, many forms pl needs",
		filepath.Join(dir, "locales/pl.yaml") + ": digest.greeting: the translation drops {name} that en has and adds {imie} that en does not have",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "fr.yaml") {
		t.Errorf("fr's missing keys are an error:\n%v", err)
	}

	// Fixed, it loads with fr's missing keys as a warning with a count.
	os.WriteFile(path, []byte("locales: locales\ndigest:\n  subject: '{{t \"digest.subject\"}}'\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "locales/pl.yaml"), []byte("digest:\n  subject: \"{Count, plural, one {# nowe} few {# nowe} many {# nowych} other {# nowego}}\"\n  greeting: \"Cześć {name}\"\n  footer: \"Pa\"\n"), 0o644)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "fr.yaml: digest.footer: 2 of 3 keys of en are missing") {
		t.Errorf("warnings: %q", c.Warnings)
	}
}

func TestTemplateCallingTWithoutLocales(t *testing.T) {
	t.Parallel()
	_, err := Parse("test.yaml", []byte("digest:\n  subject: '{{t \"digest.subject\"}}'\n"))
	if err == nil || !strings.Contains(err.Error(), "no locale is set (configure locales:)") {
		t.Errorf("got %v", err)
	}
}
