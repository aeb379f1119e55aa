package templates

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"golang.org/x/text/number"
)

// A Catalog holds the translations of every locale: one YAML file per
// locale (locales/fr.yaml, locales/pt-BR.yaml), keys nested by notifier and
// channel, each leaf an ICU message:
//
//	comment.created:
//	  in_app:
//	    title: "{author_name} commented on {post_title}"
//	    body: "{count, plural, one {# new comment} other {# new comments}}"
//
// Nested keys are joined with dots ("comment.created.in_app.title").
// Templates reach them with t: {{t "comment.created.in_app.title"}}.
// A Catalog is read-only once built and safe for concurrent use.
type Catalog struct {
	// Default is the default locale: the last step of every fallback chain.
	Default string
	// Files names, by locale, the file each locale was read from ("" for a
	// catalog built in code).
	Files    map[string]string
	messages map[string]map[string]*Message // locale -> key -> message
}

// NewCatalog builds a catalog from flat messages by locale (key -> ICU
// source). Locale tags are canonicalised ("pt_br" is "pt-BR"). An error
// names the locale and key of each message that does not parse.
func NewCatalog(defaultLocale string, sources map[string]map[string]string) (*Catalog, error) {
	c := &Catalog{Default: canonical(defaultLocale), Files: map[string]string{}, messages: map[string]map[string]*Message{}}
	var errs []string
	for _, loc := range slices.Sorted(maps.Keys(sources)) {
		tag := canonical(loc)
		m := map[string]*Message{}
		for _, key := range slices.Sorted(maps.Keys(sources[loc])) {
			msg, err := ParseMessage(sources[loc][key])
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %s: %v", loc, key, err))
				continue
			}
			m[key] = msg
		}
		c.messages[tag] = m
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return c, nil
}

// LoadCatalog reads every <locale>.yaml (or .yml) file of dir. A problem
// names the file and the key; every file is read before it returns.
func LoadCatalog(dir, defaultLocale string) (*Catalog, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read locales: %w", err)
	}
	sources := map[string]map[string]string{}
	files := map[string]string{}
	var errs []string
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		loc := strings.TrimSuffix(e.Name(), ext)
		path := filepath.Join(dir, e.Name())
		if _, err := language.Parse(loc); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %q is not a locale tag (name the file like fr.yaml or pt-BR.yaml)", path, loc))
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read locales: %w", err)
		}
		flat, err := ParseCatalogFile(data)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		sources[loc] = flat
		files[canonical(loc)] = path
	}
	c, err := NewCatalog(defaultLocale, sources)
	if err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	c.Files = files
	return c, nil
}

// ParseCatalogFile flattens one catalog file into key -> message source;
// nested mappings join their keys with dots. A leaf must be a string.
func ParseCatalogFile(data []byte) (map[string]string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	out := map[string]string{}
	if len(doc.Content) == 0 {
		return out, nil
	}
	var walk func(n *yaml.Node, prefix string) error
	walk = func(n *yaml.Node, prefix string) error {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if prefix != "" {
					k = prefix + "." + k
				}
				if err := walk(n.Content[i+1], k); err != nil {
					return err
				}
			}
		case yaml.ScalarNode:
			if prefix == "" {
				return fmt.Errorf("line %d: want a mapping of keys", n.Line)
			}
			out[prefix] = n.Value
		case yaml.AliasNode:
			return walk(n.Alias, prefix)
		default:
			return fmt.Errorf("line %d: %s: want a message (a string) or a mapping", n.Line, prefix)
		}
		return nil
	}
	return out, walk(doc.Content[0], "")
}

// canonical returns the BCP 47 form of a locale tag ("pt_br" → "pt-BR"),
// or s itself when it does not parse.
func canonical(s string) string {
	if s == "" {
		return ""
	}
	t, err := language.Parse(strings.ReplaceAll(s, "_", "-"))
	if err != nil {
		return s
	}
	return t.String()
}

// Locales returns the catalog's locales, sorted.
func (c *Catalog) Locales() []string {
	if c == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(c.messages))
}

// Chain returns the locales a message for locale is looked up in, in
// order: the locale, its parents (pt-BR → pt), then the default locale.
// Locales the catalog lacks are kept: a tenant may translate them.
func (c *Catalog) Chain(locale string) []string {
	var out []string
	add := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for s := canonical(locale); s != ""; {
		add(s)
		i := strings.LastIndexByte(s, '-')
		if i < 0 {
			break
		}
		s = s[:i]
	}
	if c != nil {
		add(c.Default)
	}
	return out
}

// Overrides are a tenant's own messages, by locale then key (ICU sources,
// parsed once by NewOverrides). They win over the catalog's at every step
// of the fallback chain.
type Overrides struct {
	messages map[string]map[string]*Message
}

// NewOverrides parses a tenant's translations (locale -> key -> message).
// nil or empty gives nil.
func NewOverrides(src map[string]map[string]string) (*Overrides, error) {
	if len(src) == 0 {
		return nil, nil
	}
	o := &Overrides{messages: map[string]map[string]*Message{}}
	for loc, keys := range src {
		m := map[string]*Message{}
		for k, s := range keys {
			msg, err := ParseMessage(s)
			if err != nil {
				return nil, fmt.Errorf("translations.%s.%s: %w", loc, k, err)
			}
			m[k] = msg
		}
		o.messages[canonical(loc)] = m
	}
	return o, nil
}

// A Locale is what a message is rendered for: a catalog's messages in one
// locale's fallback chain, a tenant's overrides, and the recipient's time
// zone for dates. Templates find it as .Locale ({{.Locale.Tag}}) and the t
// function translates with it. The zero of the pointer, nil, has no
// messages: t then fails.
type Locale struct {
	// Tag is the locale asked for ("pt-BR"); the catalog's default when the
	// recipient has none.
	Tag string
	// Zone is where dates are shown; nil is UTC.
	Zone *time.Location

	catalog   *Catalog
	overrides *Overrides
	chain     []string
	lang      language.Tag
	printer   *message.Printer
}

// Locale returns the Locale for a recipient's locale tag ("" is the
// default), zone (nil is UTC) and their tenant's overrides (nil for none).
// A nil catalog gives a Locale that formats numbers and dates but has no
// messages.
func (c *Catalog) Locale(tag string, zone *time.Location, o *Overrides) *Locale {
	if tag == "" && c != nil {
		tag = c.Default
	}
	tag = canonical(tag)
	lang, err := language.Parse(tag)
	if err != nil {
		lang = language.English
	}
	if zone == nil {
		zone = time.UTC
	}
	return &Locale{Tag: tag, Zone: zone, catalog: c, overrides: o, chain: c.Chain(tag), lang: lang,
		printer: message.NewPrinter(lang)}
}

// Lookup returns the message key names for l: the first step of the chain
// whose tenant overrides or catalog has it.
func (l *Locale) Lookup(key string) (*Message, bool) {
	for _, loc := range l.chain {
		if l.overrides != nil {
			if m, ok := l.overrides.messages[loc][key]; ok {
				return m, true
			}
		}
		if l.catalog != nil {
			if m, ok := l.catalog.messages[loc][key]; ok {
				return m, true
			}
		}
	}
	return nil, false
}

// Translate renders the message key names with args. A key no step of the
// chain has is an error naming the key and the chain.
func (l *Locale) Translate(key string, args map[string]any) (string, error) {
	if l == nil {
		return "", fmt.Errorf("t %q: no locale is set (configure locales:)", key)
	}
	m, ok := l.Lookup(key)
	if !ok {
		return "", fmt.Errorf("t %q: no message in %s", key, strings.Join(l.chain, ", "))
	}
	return m.format(l, args), nil
}

// PluralCategory is the CLDR cardinal category of n in l's language
// ("one", "few", "many", "other", …).
func (l *Locale) PluralCategory(n float64) string { return pluralCategory(l.lang, n) }

// Number formats n with l's digits and grouping ("1,234.5" in en,
// "1 234,5" in fr).
func (l *Locale) Number(n float64) string {
	return l.printer.Sprint(number.Decimal(n, number.MaxFractionDigits(6)))
}

// Date formats t in l's zone: style "short" is numeric, "medium" (the
// default) and "long" name the month where the language's names are known
// (en, fr, de, pt, pl, ru, es; numeric otherwise).
func (l *Locale) Date(t time.Time, style string) string {
	t = t.In(l.Zone)
	base, _ := l.lang.Base()
	lang := base.String()
	f, ok := dateFormats[lang]
	if !ok {
		f = dateFormats["en"]
	}
	if style == "short" || f.months == nil {
		return fmt.Sprintf(f.short, pick(f.order, t)...)
	}
	month := f.months[t.Month()-1]
	return strings.NewReplacer("{d}", fmt.Sprint(t.Day()), "{m}", month, "{y}", fmt.Sprint(t.Year())).Replace(f.long)
}

// Time formats t's time of day in l's zone (3:04 PM in en, 15:04 elsewhere).
func (l *Locale) Time(t time.Time) string {
	t = t.In(l.Zone)
	if base, _ := l.lang.Base(); base.String() == "en" {
		return t.Format("3:04 PM")
	}
	return t.Format("15:04")
}

type dateFormat struct {
	short  string // a Printf format of three numbers in order
	order  string // "mdy", "dmy", "ymd"
	long   string // with {d}, {m}, {y}
	months []string
}

func pick(order string, t time.Time) []any {
	out := make([]any, 0, 3)
	for _, c := range order {
		switch c {
		case 'd':
			out = append(out, t.Day())
		case 'm':
			out = append(out, int(t.Month()))
		case 'y':
			out = append(out, t.Year())
		}
	}
	return out
}

var dateFormats = map[string]dateFormat{
	"en": {"%d/%d/%d", "mdy", "{m} {d}, {y}", []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}},
	"fr": {"%02d/%02d/%d", "dmy", "{d} {m} {y}", []string{"janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre", "octobre", "novembre", "décembre"}},
	"de": {"%02d.%02d.%d", "dmy", "{d}. {m} {y}", []string{"Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August", "September", "Oktober", "November", "Dezember"}},
	"pt": {"%02d/%02d/%d", "dmy", "{d} de {m} de {y}", []string{"janeiro", "fevereiro", "março", "abril", "maio", "junho", "julho", "agosto", "setembro", "outubro", "novembro", "dezembro"}},
	"es": {"%d/%d/%d", "dmy", "{d} de {m} de {y}", []string{"enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto", "septiembre", "octubre", "noviembre", "diciembre"}},
	"pl": {"%02d.%02d.%d", "dmy", "{d} {m} {y}", []string{"stycznia", "lutego", "marca", "kwietnia", "maja", "czerwca", "lipca", "sierpnia", "września", "października", "listopada", "grudnia"}},
	"ru": {"%02d.%02d.%d", "dmy", "{d} {m} {y} г.", []string{"января", "февраля", "марта", "апреля", "мая", "июня", "июля", "августа", "сентября", "октября", "ноября", "декабря"}},
	"ar": {"%d/%d/%d", "dmy", "", nil},
	"ja": {"%d/%02d/%02d", "ymd", "", nil},
	"zh": {"%d/%d/%d", "ymd", "", nil},
}

// A CatalogProblem is one finding of Catalog.Check.
type CatalogProblem struct {
	File, Locale, Key, Message string
	// Warning is true for what a locale other than the default lacks:
	// rendering falls back along the chain, so nothing fails.
	Warning bool
}

func (p CatalogProblem) String() string {
	return fmt.Sprintf("%s: %s: %s", p.File, p.Key, p.Message)
}

// Check reports what is wrong with the catalog: a key of used (the keys
// templates name, nil to skip) missing in the default locale (an error),
// keys the default locale has and another lacks (a warning each locale,
// with the count and the first few), a plural missing a category its
// locale needs, and a translation whose placeholders differ from the
// default locale's (one dropped or added).
func (c *Catalog) Check(used []string) []CatalogProblem {
	var out []CatalogProblem
	def := c.messages[c.Default]
	file := func(loc string) string {
		if f := c.Files[loc]; f != "" {
			return f
		}
		return "locales/" + loc + ".yaml"
	}
	if def == nil && len(c.messages) > 0 {
		out = append(out, CatalogProblem{File: file(c.Default), Locale: c.Default, Key: "default_locale",
			Message: fmt.Sprintf("the default locale %q has no catalog (have %s)", c.Default, strings.Join(c.Locales(), ", "))})
	}
	for _, key := range used {
		if _, ok := def[key]; !ok {
			out = append(out, CatalogProblem{File: file(c.Default), Locale: c.Default, Key: key,
				Message: "used by a template but missing in the default locale " + c.Default})
		}
	}
	for _, loc := range c.Locales() {
		msgs := c.messages[loc]
		lang, _ := language.Parse(loc)
		cats := pluralCategories(lang)
		if loc != c.Default {
			var missing []string
			for k := range def {
				if _, ok := c.lookupInChain(loc, k); !ok {
					missing = append(missing, k)
				}
			}
			if len(missing) > 0 {
				sort.Strings(missing)
				first := missing[:min(len(missing), 5)]
				out = append(out, CatalogProblem{File: file(loc), Locale: loc, Key: first[0], Warning: true,
					Message: fmt.Sprintf("%d of %d keys of %s are missing (%s); they fall back to %s",
						len(missing), len(def), c.Default, strings.Join(first, ", "), strings.Join(c.Chain(loc)[1:], " → "))})
			}
		}
		for _, key := range slices.Sorted(maps.Keys(msgs)) {
			m := msgs[key]
			for arg, have := range m.pluralCases() {
				var lacks []string
				for _, cat := range cats {
					if !slices.Contains(have, cat) {
						lacks = append(lacks, cat)
					}
				}
				if len(lacks) > 0 {
					out = append(out, CatalogProblem{File: file(loc), Locale: loc, Key: key,
						Message: fmt.Sprintf("the plural of {%s} lacks the %s form%s %s needs (it has %s)", arg,
							strings.Join(lacks, ", "), pluralS(len(lacks)), loc, strings.Join(have, ", "))})
				}
			}
			if loc == c.Default {
				continue
			}
			d, ok := def[key]
			if !ok {
				continue
			}
			want, got := d.Placeholders(), m.Placeholders()
			var dropped, added []string
			for _, p := range want {
				if !slices.Contains(got, p) {
					dropped = append(dropped, "{"+p+"}")
				}
			}
			for _, p := range got {
				if !slices.Contains(want, p) {
					added = append(added, "{"+p+"}")
				}
			}
			var what []string
			if len(dropped) > 0 {
				what = append(what, "drops "+strings.Join(dropped, ", ")+" that "+c.Default+" has")
			}
			if len(added) > 0 {
				what = append(what, "adds "+strings.Join(added, ", ")+" that "+c.Default+" does not have")
			}
			if len(what) > 0 {
				out = append(out, CatalogProblem{File: file(loc), Locale: loc, Key: key,
					Message: "the translation " + strings.Join(what, " and ")})
			}
		}
	}
	return out
}

// lookupInChain finds key along loc's chain, the default locale left out.
func (c *Catalog) lookupInChain(loc, key string) (*Message, bool) {
	for _, l := range c.Chain(loc) {
		if l == c.Default {
			break
		}
		if m, ok := c.messages[l][key]; ok {
			return m, true
		}
	}
	return nil, false
}

func pluralS(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
