package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads the config file at path and parses it (see Parse). A file that
// cannot be read gives the *os.PathError; a file whose content is wrong gives
// an *Errors listing every problem.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data)
}

// Parse parses and validates a YAML config. path names the file in errors and
// is stored in Config.Path.
//
// ${VAR} is replaced by the environment variable VAR (unset reads as ""; $$ is
// a literal $; a $ followed by anything else is kept). It works anywhere in the
// text, flow mappings included, but a value is always taken literally: it can
// never change the document's structure, and lines stay those of the file. An
// empty or null value keeps the default. The environment variable
// NOTIFYD_LISTEN (ListenEnv), when set, replaces http.listen. Unknown keys are errors, except
// top-level keys starting with "x-", which are ignored so that they can hold
// YAML anchors to reuse with *alias or <<: merge keys. Every problem
// is collected: the returned error is an *Errors in line order. On success the
// Config has every default filled in, Notifier.Name set from its key, schemas
// compiled, templates parsed and rendered once against an example, and cron
// specs and time zones loaded.
func Parse(path string, data []byte) (*Config, error) {
	return parseWith(path, data, os.LookupEnv)
}

// ListenEnv names the environment variable that, when set and not empty,
// replaces http.listen in every config Parse and Load read.
const ListenEnv = "NOTIFYD_LISTEN"

// Checker checks the parts of a parsed config that belong to plug-ins (the
// channels' sections), reporting every problem through p.
// channels.Registry.Check is one.
type Checker func(c *Config, p *Problems)

// LoadWith is Load followed by check, with check's problems merged into
// Load's in line order: one run reports everything wrong with the file.
// check runs only on a file that parsed as YAML.
func LoadWith(path string, check Checker) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return ParseWith(path, data, check)
}

// ParseWith is Parse followed by check (see LoadWith).
func ParseWith(path string, data []byte, check Checker) (*Config, error) {
	return parseCheck(path, data, os.LookupEnv, check)
}

func parseWith(path string, data []byte, lookup func(string) (string, bool)) (*Config, error) {
	return parseCheck(path, data, lookup, nil)
}

func parseCheck(path string, data []byte, lookup func(string) (string, bool), check Checker) (*Config, error) {
	el := newErrorList(path)
	c := &Config{}
	c.setDefaults()
	c.Path = path

	text, refs := protectEnv(data)
	dec := yaml.NewDecoder(strings.NewReader(text))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		line, msg := yamlSyntaxError(err)
		el.addLine(line, "", "%s", msg)
		return nil, el.err()
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		el.addLine(extra.Line, "", "more than one YAML document (--- separator): a config is one document")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if root.Kind != 0 {
		el.lines[""] = root.Line
		expandNode(root, "", refs, lookup, el, map[*yaml.Node]bool{})
		d := &decoder{errs: el}
		d.decode(root, "", reflect.ValueOf(c).Elem())
	}
	if c.Notifiers == nil {
		c.Notifiers = map[string]*Notifier{}
	}
	// NOTIFYD_LISTEN moves the HTTP API off http.listen without editing the
	// file (`make run LISTEN=…`, a second daemon on one machine).
	if v, ok := lookup(ListenEnv); ok && v != "" {
		c.HTTP.Listen = v
	}
	c.validate(el)
	c.lines = el.lines
	c.unset = el.unset
	if check != nil {
		check(c, &Problems{el: el, c: c})
	}
	c.checkCatalog(el)
	if err := el.err(); err != nil {
		return nil, err
	}
	return c, nil
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlSyntaxError splits "yaml: line 3: could not find expected ':'".
func yamlSyntaxError(err error) (int, string) {
	s := err.Error()
	if m := yamlLineRE.FindStringSubmatch(s); m != nil {
		var n int
		fmt.Sscan(m[1], &n)
		return n, "invalid YAML: " + m[2]
	}
	return 0, "invalid YAML: " + strings.TrimPrefix(s, "yaml: ")
}

// Default returns a Config with every default filled in and no notifiers
// (Notifiers is an empty, non-nil map). Its digest templates are parsed and its
// cron specs and time zone loaded, as Load would. It is meant for tests and
// for tools that need a Config without a file.
func Default() *Config {
	c, err := parseWith("", nil, func(string) (string, bool) { return "", false })
	if err != nil {
		panic("config: defaults do not validate: " + err.Error())
	}
	return c
}

// Check loads the config at path and returns every problem found, or nil. It
// is what `notifyd check` runs: the error is an *Errors (one line per problem,
// "file:line: key.path: message") or an I/O error.
func Check(path string) error {
	_, err := Load(path)
	return err
}

// ReasonRank returns the precedence of reason: its index in Reasons, 0 being
// the strongest. A reason not listed ranks after every listed one
// (len(Reasons)), so any word is accepted as a reason but never beats a
// configured one; two unknown reasons rank equal.
func (c *Config) ReasonRank(reason string) int {
	if i := slices.Index(c.Reasons, reason); i >= 0 {
		return i
	}
	return len(c.Reasons)
}

// Notifier returns the notifier named name and whether it exists.
func (c *Config) Notifier(name string) (*Notifier, bool) {
	n, ok := c.Notifiers[name]
	return n, ok && n != nil
}

// NotifierNames returns the notifier names, sorted.
func (c *Config) NotifierNames() []string {
	names := make([]string, 0, len(c.Notifiers))
	for name := range c.Notifiers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
