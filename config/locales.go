package config

import (
	htmltemplate "html/template"
	"path/filepath"
	"reflect"
	"slices"
	"text/template"
	"time"

	"github.com/notifyd/notifyd/templates"
)

// loadCatalog reads the message catalogs of c.Locales, relative to the
// config file's directory.
func (c *Config) loadCatalog(el *errorList) {
	if c.DefaultLocale == "" {
		c.DefaultLocale = "en"
	}
	if c.Locales == "" {
		return
	}
	dir := c.Locales
	if !filepath.IsAbs(dir) && c.Path != "" {
		dir = filepath.Join(filepath.Dir(c.Path), dir)
	}
	cat, err := templates.LoadCatalog(dir, c.DefaultLocale)
	if err != nil {
		el.add("locales", "%v", err)
		return
	}
	c.Catalog = cat
}

// ExampleLocale is the Locale `notifyd check` renders templates with: the
// default locale in UTC. Without locales it is nil, and a template calling
// t does not render.
func (c *Config) ExampleLocale() *templates.Locale {
	if c == nil || c.Catalog == nil {
		return nil
	}
	return c.Catalog.Locale("", nil, nil)
}

// useKeys notes the catalog keys t names, for checkCatalog.
func (c *Config) useKeys(t templates.Executor) {
	if c == nil || t == nil || reflect.ValueOf(t).IsNil() {
		return
	}
	for _, k := range templates.Keys(t) {
		if c.usedKeys == nil {
			c.usedKeys = map[string]bool{}
		}
		c.usedKeys[k] = true
	}
}

// checkCatalog reports the catalog's problems: errors at key "locales"
// (each naming its file and key), and warnings in c.Warnings.
func (c *Config) checkCatalog(el *errorList) {
	if c.Catalog == nil {
		return
	}
	var used []string
	for k := range c.usedKeys {
		used = append(used, k)
	}
	slices.Sort(used)
	for _, p := range c.Catalog.Check(used) {
		if p.Warning {
			c.Warnings = append(c.Warnings, "locales: "+p.String())
			continue
		}
		el.add("locales."+p.Locale+"."+p.Key, "%s", p.String())
	}
}

// recipientTextTmpl and htmlTmpl are the loader's own template parses
// (digest, email): they note the keys they name for the catalog check.
func (c *Config) recipientTextTmpl(el *errorList, path, src string) *template.Template {
	t := recipientTextTmpl(el, path, src)
	c.useKeys(t)
	return t
}

func (c *Config) htmlTmpl(el *errorList, path, src string) *htmltemplate.Template {
	t := htmlTmpl(el, path, src)
	c.useKeys(t)
	return t
}

// Localize returns params with the Locale of a recipient's locale tag and
// time zone ("" or unknown: digest.timezone), in the default locale's
// fallback chain, for a template to render as that recipient reads it
// (previews; the jobs do the same for every message). Without locales it
// returns params unchanged.
func (c *Config) Localize(params map[string]any, locale, timezone string) map[string]any {
	if c == nil || c.Catalog == nil {
		return params
	}
	zone := c.Digest.Location
	if timezone != "" {
		if z, err := time.LoadLocation(timezone); err == nil {
			zone = z
		}
	}
	return templates.WithLocale(params, c.Catalog.Locale(locale, zone, nil))
}
