package config

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Error is one problem found in a config file.
//
// File is the path given to Load or Parse. Line is 1-based; 0 means the problem
// cannot be tied to a line (an empty file, say). Path is the dotted key path
// ("notifiers.comment.created.channels.email.default", sequence items as
// "reasons[2]"); "" means the whole document.
type Error struct {
	File    string
	Line    int
	Path    string
	Message string
}

// Error formats e as "file:line: path: message", leaving out the parts that
// are empty or zero.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(":")
	}
	if e.Line > 0 {
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(":")
	}
	if b.Len() > 0 {
		b.WriteString(" ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Errors is every problem found in one config file, in line order. Load, Parse
// and Check return it (as an error) whenever the file's content is wrong; it
// always holds at least one Error.
type Errors struct {
	Errors []*Error
}

// Error returns one line per problem, in line order.
func (e *Errors) Error() string {
	lines := make([]string, len(e.Errors))
	for i, err := range e.Errors {
		lines[i] = err.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the individual errors, so errors.As can reach an *Error.
func (e *Errors) Unwrap() []error {
	errs := make([]error, len(e.Errors))
	for i, err := range e.Errors {
		errs[i] = err
	}
	return errs
}

// errorList collects errors while a file is decoded and validated. lines maps
// every key path seen in the file to the line of its key, so validation (which
// works on decoded values) can still say where a value came from.
type errorList struct {
	file   string
	lines  map[string]int
	failed map[string]bool
	errs   []*Error
	// unset names, by key path, the environment variables a value was
	// written with (${VAR}) that were unset or empty: a problem with that
	// value says which variable to set.
	unset map[string][]string
}

func newErrorList(file string) *errorList {
	return &errorList{file: file, lines: map[string]int{}, failed: map[string]bool{}, unset: map[string][]string{}}
}

// addLine records an error at an explicit line. Only the first error for a
// key path is kept: a value that did not decode is not also reported as
// missing or invalid.
func (l *errorList) addLine(line int, path, format string, args ...any) {
	if path != "" {
		if l.failed[path] {
			return
		}
		l.failed[path] = true
	}
	msg := fmt.Sprintf(format, args...)
	if names := l.unset[path]; len(names) > 0 {
		// The value came from the environment, which left it empty: the
		// fix is there, not in the file.
		msg += " (set " + strings.Join(names, " and ") + ")"
	}
	l.errs = append(l.errs, &Error{File: l.file, Line: line, Path: path, Message: msg})
}

// add records an error at path, on the line of path or of its nearest
// ancestor present in the file (a missing key is reported on its parent).
func (l *errorList) add(path, format string, args ...any) {
	l.addLine(l.line(path), path, format, args...)
}

// line returns the line of path or of its nearest ancestor, 0 if none.
func (l *errorList) line(path string) int {
	for {
		if n, ok := l.lines[path]; ok {
			return n
		}
		if path == "" {
			return 0
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			path = ""
		} else {
			path = path[:i]
		}
	}
}

// has reports whether path was written in the file.
func (l *errorList) has(path string) bool {
	_, ok := l.lines[path]
	return ok
}

// err returns the collected errors sorted by line, or nil.
func (l *errorList) err() error {
	if len(l.errs) == 0 {
		return nil
	}
	errs := append([]*Error(nil), l.errs...)
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
	return &Errors{Errors: errs}
}

// join appends a key to a path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
