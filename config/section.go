package config

import (
	"github.com/notifyd/notifyd/notifytype"
	"github.com/notifyd/notifyd/templates"

	"fmt"
	htmltemplate "html/template"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"go.yaml.in/yaml/v3"
)

// Section is a part of the config file that belongs to a channel plug-in:
// channels.<name>, or the channel's keys under notifiers.<n>.channels.<name>.
// Load keeps it undecoded, with the lines it came from; the channel decodes
// it with Problems.Decode into its own types, so an unknown key or a wrong
// value is reported with the file, line and key path like any other config
// error.
//
// A nil *Section, or one whose key was written with nothing under it, is
// empty: Decode then only applies the defaults.
type Section struct {
	path string
	node *yaml.Node
	// notifier is the notifier whose channel section this is (set by
	// Load): RenderCheck checks its templates' fields against the
	// notifier's params schema.
	notifier *Notifier
}

// Path is the section's dotted key path ("channels.email").
func (s *Section) Path() string {
	if s == nil {
		return ""
	}
	return s.path
}

// Empty reports whether the section has no keys.
func (s *Section) Empty() bool {
	return s == nil || s.node == nil || isNull(s.node) || (s.node.Kind == yaml.MappingNode && len(s.node.Content) == 0)
}

// NewSection parses src (YAML) as a section at path. It is for tests and
// for programs that build a Config by hand.
func NewSection(path, src string) (*Section, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	n := &doc
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	return &Section{path: path, node: n}, nil
}

var (
	sectionType         = reflect.TypeFor[*Section]()
	notifierChannelType = reflect.TypeFor[*NotifierChannel]()
)

// decodeSection keeps a *Section (or a notifier's *NotifierChannel) as the
// node it was written as, and reports whether v was one of them.
func (d *decoder) decodeSection(n *yaml.Node, path string, v reflect.Value) bool {
	switch v.Type() {
	case sectionType:
		if !isNull(n) && n.Kind != yaml.MappingNode {
			d.errs.addLine(n.Line, path, "want a mapping, got %s", describe(n))
		}
		v.Set(reflect.ValueOf(&Section{path: path, node: n}))
		return true
	case notifierChannelType:
		nc := &NotifierChannel{Section: &Section{path: path}}
		v.Set(reflect.ValueOf(nc))
		if isNull(n) {
			return true
		}
		if n.Kind != yaml.MappingNode {
			d.errs.addLine(n.Line, path, "want a mapping, got %s", describe(n))
			return true
		}
		rest := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: n.Line, Column: n.Column}
		for _, p := range d.pairs(n, path) {
			child := join(path, p.key.Value)
			d.errs.lines[child] = p.key.Line
			if p.key.Value == "default" {
				d.decode(p.val, child, reflect.ValueOf(&nc.Default).Elem())
				continue
			}
			if d.decodeWorkflowKey(nc, p, child) {
				continue
			}
			rest.Content = append(rest.Content, p.key, p.val)
		}
		nc.Section.node = rest
		return true
	}
	return false
}

// keyPath is the dotted path of key within s ("" is s itself).
func keyPath(s *Section, key string) string {
	if key == "" {
		return s.Path()
	}
	return join(s.Path(), key)
}

// Problems collects what is wrong with the plug-in sections of one config
// file, each problem with the file, line and key path, in the same form as
// Load's errors. A channel reports through it while it opens; the registry
// returns Err when every channel has had its say.
type Problems struct {
	el *errorList
	c  *Config // the config being checked: its catalog and used keys
}

// NewProblems starts a list of problems for c's file.
func (c *Config) NewProblems() *Problems {
	lines := c.lines
	if lines == nil {
		lines = map[string]int{}
	}
	return &Problems{el: &errorList{file: c.Path, lines: lines, failed: map[string]bool{}, unset: c.unset}, c: c}
}

// Err returns every problem reported, in line order, as an *Errors; nil when
// there is none.
func (p *Problems) Err() error { return p.el.err() }

// Decode decodes s into v, a pointer to the channel's config type, following
// `yaml` struct tags as Load does: unknown keys, wrong types and bad
// durations are reported with their lines, and decoding goes on with the
// rest. A v that implements Defaulter gets its defaults first. It reports
// whether s decoded without a problem.
func (p *Problems) Decode(s *Section, v any) bool {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		panic("config: Decode needs a non-nil pointer")
	}
	setDefaults(v)
	if s.Empty() {
		return true
	}
	before := len(p.el.errs)
	d := &decoder{errs: p.el}
	d.decode(s.node, s.path, rv.Elem())
	return len(p.el.errs) == before
}

// Add reports a problem at key within s ("" is the section itself). The line
// is the key's, or the nearest enclosing key's when key was not written.
func (p *Problems) Add(s *Section, key, format string, args ...any) {
	p.el.add(keyPath(s, key), format, args...)
}

// Has reports whether key was written in s.
func (p *Problems) Has(s *Section, key string) bool { return p.el.has(keyPath(s, key)) }

// Text parses the text/template src found at key within s, reporting a
// syntax error there. Templates get notifyd's conventions (missingkey=zero, an
// absent param prints ""). An empty src gives nil.
func (p *Problems) Text(s *Section, key, src string) *template.Template {
	t := textTmpl(p.el, keyPath(s, key), src)
	p.c.useKeys(t)
	return t
}

// RecipientText is Text for a template that may call recipient
// ({{recipient.Name}}), for a channel that renders each message for one
// recipient and binds the function to them at every render (the email
// channel does). Text does not define the function: anywhere else it would
// render the same example person for everyone.
func (p *Problems) RecipientText(s *Section, key, src string) *template.Template {
	t := recipientTextTmpl(p.el, keyPath(s, key), src)
	p.c.useKeys(t)
	return t
}

// HTML is Text for html/template: params are escaped for HTML, and the
// recipient function is defined (only the email channel has html
// templates).
func (p *Problems) HTML(s *Section, key, src string) *htmltemplate.Template {
	t := htmlTmpl(p.el, keyPath(s, key), src)
	p.c.useKeys(t)
	return t
}

// RenderCheck renders t (a *template.Template or *htmltemplate.Template; nil
// is skipped) with data, as `notifyd check` does with a notifier's example
// params, and reports a failure at key within s. In a notifier's channel
// section it also reports every field the template names that the
// notifier's params schema does not declare ({{.post_titel}} for
// post_title), with the template's line: such a field would always render
// as nothing.
func (p *Problems) RenderCheck(s *Section, key string, t templates.Executor, data any) {
	if t == nil || reflect.ValueOf(t).IsNil() {
		return
	}
	path := keyPath(s, key)
	if params, ok := data.(map[string]any); ok {
		// Templates see the notification's tenant as .Tenant.
		data = templates.WithLocale(notifytype.TemplateParams(params, &ExampleTenant), p.c.ExampleLocale())
	}
	if err := t.Execute(discard{}, data); err != nil {
		p.el.add(path, "template does not render with the example params: %v", templates.CleanError(path, err))
		return
	}
	if s != nil {
		checkFields(p.el, path, t, s.notifier)
	}
}

// ExampleTenant is the tenant `notifyd check` renders templates with (and
// `notifyd preview` without -tenant).
var ExampleTenant = notifytype.Tenant{ID: "example", Name: "Example", Branding: notifytype.Branding{
	LogoURL: "https://example.com/logo.png", PrimaryColor: "#336699", EmailFrom: "Example <notify@example.com>"}}

// HTTPURL reports a problem at key within s unless u is an absolute http or
// https URL.
func (p *Problems) HTTPURL(s *Section, key, u string) { httpURL(p.el, keyPath(s, key), u) }

// Positive reports a problem at key within s unless d is positive.
func (p *Problems) Positive(s *Section, key string, d Duration) {
	positive(p.el, keyPath(s, key), d)
}

// Mode reports a problem at key within s unless got is one of want.
func (p *Problems) Mode(s *Section, key, got string, want ...string) {
	mode(p.el, keyPath(s, key), got, want...)
}

// ExampleParams returns the params `notifyd check` renders the notifier's
// templates with: its `example`, or one built from its params schema.
func (n *Notifier) ExampleParams() map[string]any {
	if n.example == nil {
		return map[string]any{}
	}
	return n.example
}

// With returns a copy of s with the given keys set, each a dotted path
// within the section ("smtp.host") and a value YAML can encode; a key that
// is written already is replaced, the others are added. `notifyd dev` uses
// it to point channels.email at its capturing SMTP server. A numeric part
// steps into an entry of a list the section has ("providers.1.base_url");
// an entry that is not there is an error. A nil s is an empty section at
// path.
func (s *Section) With(path string, values map[string]any) (*Section, error) {
	root := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if s != nil {
		path = s.path
		if n := resolveAlias(s.node); n != nil && n.Kind == yaml.MappingNode {
			root = cloneNode(n)
		}
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var v yaml.Node
		if err := v.Encode(values[k]); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", path, k, err)
		}
		m := root
		parts := strings.Split(k, ".")
		for i, part := range parts[:len(parts)-1] {
			if m.Kind == yaml.SequenceNode {
				// "providers.1.base_url": an entry of a list that is written.
				j, err := strconv.Atoi(part)
				if err != nil || j < 0 || j >= len(m.Content) || resolveAlias(m.Content[j]).Kind != yaml.MappingNode {
					return nil, fmt.Errorf("%s.%s: no mapping at %s", path, k, strings.Join(parts[:i+1], "."))
				}
				m = resolveAlias(m.Content[j])
				continue
			}
			m = childMapping(m, part, isIndex(parts[i+1]))
		}
		if m.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s.%s: not a mapping", path, k)
		}
		setKey(m, parts[len(parts)-1], &v)
	}
	out := &Section{path: path, node: root}
	if s != nil {
		out.notifier = s.notifier
	}
	return out, nil
}

func cloneNode(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, x := range n.Content {
		c.Content[i] = cloneNode(resolveAlias(x))
	}
	return &c
}

// childMapping returns m's mapping under key, creating (or replacing a
// non-mapping value with) an empty one; a list at key is kept when the path
// goes on with an index (list).
func childMapping(m *yaml.Node, key string, list bool) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			if list && m.Content[i+1].Kind == yaml.SequenceNode {
				return m.Content[i+1]
			}
			if m.Content[i+1].Kind != yaml.MappingNode {
				m.Content[i+1] = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			}
			return m.Content[i+1]
		}
	}
	c := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, c)
	return c
}

func isIndex(part string) bool {
	_, err := strconv.Atoi(part)
	return err == nil
}

func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
}

// Value returns the scalar written at the dotted key within s, and whether
// there is one. A part of the key that is a number indexes a list
// ("smtp.1.host": the host of the second entry of smtp).
func (s *Section) Value(key string) (string, bool) {
	if s.Empty() {
		return "", false
	}
	n := resolveAlias(s.node)
	for _, part := range strings.Split(key, ".") {
		if n == nil {
			return "", false
		}
		var next *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == part {
					next = resolveAlias(n.Content[i+1])
				}
			}
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(part); err == nil && i >= 0 && i < len(n.Content) {
				next = resolveAlias(n.Content[i])
			}
		default:
			return "", false
		}
		n = next
	}
	if n == nil || n.Kind != yaml.ScalarNode || isNull(n) {
		return "", false
	}
	return n.Value, true
}
