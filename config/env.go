package config

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Environment expansion happens in two steps so that it behaves like a textual
// substitution before parsing (`{secret: ${SECRET}, timeout: 10s}` works in a
// flow mapping) while a value can never change the document's structure (a
// secret holding "#", ": " or a newline is taken literally) and line numbers
// stay those of the file:
//
//  1. protectEnv replaces each ${NAME} and $$ in the raw text by a plain
//     placeholder token, which is valid YAML wherever it appears;
//  2. after parsing, expandNode replaces the tokens in every scalar (keys and
//     values) by the variable's value, and re-types plain scalars, so
//     `port: ${PORT}` with PORT=1025 is an integer and an unset variable reads
//     as empty (which keeps the default).
//
// A malformed reference (`${` without `}` on its line, or a bad name) is left
// in the text and reported by expandNode with its key path.

// envRefs is what protectEnv replaced: the placeholder prefix and, by index,
// the variable names ("$" standing for a literal $).
type envRefs struct {
	marker string
	names  []string
	re     *regexp.Regexp
}

func protectEnv(data []byte) (string, *envRefs) {
	s := string(data)
	marker := "xNOTIFYDENV"
	for strings.Contains(s, marker) {
		marker += "x"
	}
	refs := &envRefs{marker: marker, re: regexp.MustCompile(regexp.QuoteMeta(marker) + `(\d+)x`)}
	if !strings.Contains(s, "$") {
		return s, refs
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		name := ""
		skip := 0
		switch s[i+1] {
		case '$':
			name, skip = "$", 1
		case '{':
			line := s[i+2:]
			if nl := strings.IndexByte(line, '\n'); nl >= 0 {
				line = line[:nl]
			}
			end := strings.IndexByte(line, '}')
			if end >= 0 && isEnvName(line[:end]) {
				name, skip = line[:end], end+2
			}
		}
		if name == "" {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%s%dx", marker, len(refs.names))
		refs.names = append(refs.names, name)
		i += skip
	}
	return b.String(), refs
}

// expandNode expands the placeholders protectEnv left in every scalar under n,
// reporting malformed ${...} references.
func expandNode(n *yaml.Node, path string, refs *envRefs, lookup func(string) (string, bool), el *errorList, seen map[*yaml.Node]bool) {
	if n == nil || seen[n] {
		return
	}
	seen[n] = true
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			expandNode(c, path, refs, lookup, el, seen)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			expandNode(k, path, refs, lookup, el, seen)
			expandNode(n.Content[i+1], join(path, k.Value), refs, lookup, el, seen)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			expandNode(c, fmt.Sprintf("%s[%d]", path, i), refs, lookup, el, seen)
		}
	case yaml.ScalarNode:
		if i := strings.Index(n.Value, "${"); i >= 0 {
			el.addLine(n.Line, path, "%s", badRef(n.Value[i:]))
			return
		}
		if !strings.Contains(n.Value, refs.marker) {
			return
		}
		n.Value = refs.re.ReplaceAllStringFunc(n.Value, func(tok string) string {
			i, err := strconv.Atoi(refs.re.FindStringSubmatch(tok)[1])
			if err != nil || i >= len(refs.names) {
				return tok
			}
			if refs.names[i] == "$" {
				return "$"
			}
			v, _ := lookup(refs.names[i])
			if v == "" && !slices.Contains(el.unset[path], refs.names[i]) {
				el.unset[path] = append(el.unset[path], refs.names[i])
			}
			return v
		})
		if n.Style == 0 {
			// A plain scalar without an explicit tag: let the new value decide
			// its type, as if it had been written in the file.
			n.Tag = ""
		}
	}
}

// badRef explains a ${ that protectEnv could not read as a reference.
func badRef(s string) string {
	end := strings.IndexAny(s, "}\n")
	if end < 0 || s[end] != '}' {
		return "unterminated ${ (write $$ for a literal $)"
	}
	return fmt.Sprintf("invalid variable name %q in ${...} (want letters, digits and _; write $$ for a literal $)", s[2:end])
}

func isEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
