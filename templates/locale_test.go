package templates

import (
	"strings"
	"testing"
	"time"
)

func testCatalog(t *testing.T) *Catalog {
	t.Helper()
	c, err := NewCatalog("en", map[string]map[string]string{
		"en": {
			"comment.in_app.title": "{author} left {count, plural, one {# comment} other {# comments}}",
			"comment.in_app.when":  "on {at, date, long} at {at, time}",
			"comment.amount":       "{n, number}",
			"digest.subject":       "{Count, plural, =0 {Nothing new} one {# new notification} other {# new notifications}}",
			"only.en":              "English only",
		},
		"fr": {
			"comment.in_app.title": "{author} a laissé {count, plural, one {# commentaire} other {# commentaires}}",
			"comment.in_app.when":  "le {at, date, long} à {at, time}",
		},
		"pl": {"comment.in_app.title": "{author}: {count, plural, one {# komentarz} few {# komentarze} many {# komentarzy} other {# komentarza}}"},
		"ar": {"comment.in_app.title": "{author}: {count, plural, zero {لا تعليقات} one {تعليق واحد} two {تعليقان} few {# تعليقات} many {# تعليقًا} other {# تعليق}}"},
		"pt": {"only.en": "Só em português"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPluralsPerLocale renders one message in en, fr, pl and ar with counts
// that fall in every CLDR category each language has.
func TestPluralsPerLocale(t *testing.T) {
	t.Parallel()
	c := testCatalog(t)
	tests := []struct {
		locale string
		count  float64
		want   string
	}{
		{"en", 1, "Ann left 1 comment"},
		{"en", 3, "Ann left 3 comments"},
		{"fr", 0, "Ann a laissé 0 commentaire"},
		{"fr", 1, "Ann a laissé 1 commentaire"},
		{"fr", 2, "Ann a laissé 2 commentaires"},
		{"pl", 1, "Ann: 1 komentarz"},
		{"pl", 3, "Ann: 3 komentarze"},
		{"pl", 5, "Ann: 5 komentarzy"},
		{"pl", 22, "Ann: 22 komentarze"},
		{"pl", 25, "Ann: 25 komentarzy"},
		{"pl", 1.5, "Ann: 1,5 komentarza"},
		{"ar", 0, "Ann: لا تعليقات"},
		{"ar", 1, "Ann: تعليق واحد"},
		{"ar", 2, "Ann: تعليقان"},
		{"ar", 3, "Ann: ٣ تعليقات"},
		{"ar", 11, "Ann: ١١ تعليقًا"},
		{"ar", 100, "Ann: ١٠٠ تعليق"},
	}
	for _, tc := range tests {
		got, err := c.Locale(tc.locale, nil, nil).Translate("comment.in_app.title", map[string]any{"author": "Ann", "count": tc.count})
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s %v: got %q, want %q", tc.locale, tc.count, got, tc.want)
		}
	}
}

func TestFallbackChain(t *testing.T) {
	t.Parallel()
	c := testCatalog(t)
	if got := strings.Join(c.Chain("pt-BR"), " "); got != "pt-BR pt en" {
		t.Errorf("chain = %s", got)
	}
	for loc, want := range map[string]string{"pt-BR": "Só em português", "pt": "Só em português", "fr": "English only", "": "English only", "xx": "English only"} {
		got, err := c.Locale(loc, nil, nil).Translate("only.en", nil)
		if err != nil || got != want {
			t.Errorf("%q: got %q, %v; want %q", loc, got, err, want)
		}
	}
	if _, err := c.Locale("fr", nil, nil).Translate("nope", nil); err == nil || !strings.Contains(err.Error(), "fr, en") {
		t.Errorf("missing key: %v", err)
	}
	o, err := NewOverrides(map[string]map[string]string{"pt": {"only.en": "Nosso jeito"}, "en": {"only.en": "Our way"}})
	if err != nil {
		t.Fatal(err)
	}
	for loc, want := range map[string]string{"pt-BR": "Nosso jeito", "fr": "Our way"} {
		if got, _ := c.Locale(loc, nil, o).Translate("only.en", nil); got != want {
			t.Errorf("override %s: got %q, want %q", loc, got, want)
		}
	}
}

func TestDatesAndNumbersPerLocaleAndZone(t *testing.T) {
	t.Parallel()
	c := testCatalog(t)
	at := time.Date(2026, 3, 1, 23, 30, 0, 0, time.UTC)
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip(err)
	}
	got, _ := c.Locale("fr", paris, nil).Translate("comment.in_app.when", map[string]any{"at": at.Format(time.RFC3339)})
	if got != "le 2 mars 2026 à 00:30" {
		t.Errorf("fr: %q", got)
	}
	got, _ = c.Locale("en", nil, nil).Translate("comment.in_app.when", map[string]any{"at": at})
	if got != "on March 1, 2026 at 11:30 PM" {
		t.Errorf("en: %q", got)
	}
	for loc, want := range map[string]string{"en": "1,234.5", "de": "1.234,5", "fr": "1\u00a0234,5"} {
		if got, _ := c.Locale(loc, nil, nil).Translate("comment.amount", map[string]any{"n": 1234.5}); got != want {
			t.Errorf("%s number: %q, want %q", loc, got, want)
		}
	}
}

// TestTranslateInTemplates: t reaches the recipient's locale through the
// dot, in text, html and digest templates alike, and its key is listed.
func TestTranslateInTemplates(t *testing.T) {
	t.Parallel()
	c := testCatalog(t)
	text, err := ParseText("x", `{{t "comment.in_app.title"}}|{{with .author}}{{t "comment.in_app.title" "author" . "count" 2}}{{end}}`)
	if err != nil {
		t.Fatal(err)
	}
	params := map[string]any{"author": "<b>", "count": 1.0}
	got, err := RenderText(text, WithLocale(params, c.Locale("pl", nil, nil)))
	if err != nil || got != "<b>: 1 komentarz|<b>: 2 komentarze" {
		t.Errorf("text: %q, %v", got, err)
	}
	if keys := Keys(text); strings.Join(keys, ",") != "comment.in_app.title,comment.in_app.title" {
		t.Errorf("keys: %v", keys)
	}
	html, err := ParseHTML("h", `<p>{{t "comment.in_app.title"}}</p>`)
	if err != nil {
		t.Fatal(err)
	}
	got, err = RenderHTML(html, WithLocale(params, c.Locale("fr", nil, nil)))
	if err != nil || got != "<p>&lt;b&gt; a laissé 1 commentaire</p>" {
		t.Errorf("html: %q, %v", got, err)
	}
	subj, err := ParseRecipientText("s", `{{t "digest.subject"}}`)
	if err != nil {
		t.Fatal(err)
	}
	s, _, _, err := RenderDigest(subj, nil, nil, DigestData{Count: 3, Locale: c.Locale("en", nil, nil)})
	if err != nil || s != "3 new notifications" {
		t.Errorf("digest: %q, %v", s, err)
	}
	if _, err := RenderText(text, params); err == nil {
		t.Error("t without a locale rendered")
	}
}

func TestCatalogCheck(t *testing.T) {
	t.Parallel()
	c, err := NewCatalog("en", map[string]map[string]string{
		"en": {"a": "{n, plural, one {# item} other {# items}}", "b": "Hello {name}", "c": "C"},
		"pl": {"a": "{n, plural, one {# rzecz} other {# rzeczy}}", "b": "Cześć {imie}"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range c.Check([]string{"a", "zz"}) {
		got = append(got, p.Locale+" "+p.Key+" "+p.Message)
	}
	want := []string{
		"en zz used by a template but missing in the default locale en",
		"pl c 1 of 3 keys of en are missing (c); they fall back to en",
		"pl a the plural of {n} lacks the few, many forms pl needs (it has one, other)",
		"pl b the translation drops {name} that en has and adds {imie} that en does not have",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := NewCatalog("en", map[string]map[string]string{"en": {"x": "{n, plural, one {a}}"}}); err == nil {
		t.Error("a plural without other parsed")
	}
}
