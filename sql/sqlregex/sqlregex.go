// Package sqlregex translates a JSON Schema pattern, as the params validator
// reads it (Go's regexp syntax), into a PostgreSQL advanced regular
// expression that matches exactly the same strings, for the params check
// notify_send runs. A pattern with no exact translation is an error, which
// config reports at load.
package sqlregex

import (
	"fmt"
	"regexp/syntax"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Translate returns the PostgreSQL regular expression (for ~ and SQL/JSON
// path's like_regex with flag "s") that finds a match in exactly the strings
// in which Go's regexp finds one for pattern. Matching is unanchored in both,
// as JSON Schema's pattern is. Refused: word boundaries (\b, \B: PostgreSQL's
// word characters follow the locale) and ^ and $ under the multi-line flag
// (?m). Counted repetitions are written out (regexp/syntax's Simplify), so
// PostgreSQL's limit of 255 does not apply.
func Translate(pattern string) (string, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := emit(&b, re.Simplify()); err != nil {
		return "", err
	}
	return b.String(), nil
}

func emit(b *strings.Builder, re *syntax.Regexp) error {
	switch re.Op {
	case syntax.OpNoMatch:
		b.WriteString(`[^\U00000001-\U0010ffff]`)
	case syntax.OpEmptyMatch:
		b.WriteString(`(?:)`)
	case syntax.OpLiteral:
		if len(re.Rune) > 1 {
			b.WriteString("(?:")
		}
		for _, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				class(b, foldClass(r))
			} else {
				literal(b, r)
			}
		}
		if len(re.Rune) > 1 {
			b.WriteString(")")
		}
	case syntax.OpCharClass:
		class(b, re.Rune)
	case syntax.OpAnyCharNotNL:
		class(b, []rune{0, '\n' - 1, '\n' + 1, utf8.MaxRune})
	case syntax.OpAnyChar:
		class(b, []rune{0, utf8.MaxRune})
	case syntax.OpBeginText:
		b.WriteString(`^`)
	case syntax.OpEndText:
		b.WriteString(`$`)
	case syntax.OpBeginLine, syntax.OpEndLine:
		return fmt.Errorf("line anchors ((?m) with ^ or $) have no exact PostgreSQL equivalent")
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return fmt.Errorf(`word boundaries (\b, \B) have no exact PostgreSQL equivalent`)
	case syntax.OpCapture:
		b.WriteString("(?:")
		if err := emit(b, re.Sub[0]); err != nil {
			return err
		}
		b.WriteString(")")
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
		// Greediness does not change whether a match exists.
		b.WriteString("(?:")
		if err := emit(b, re.Sub[0]); err != nil {
			return err
		}
		b.WriteString(")")
		b.WriteString(map[syntax.Op]string{syntax.OpStar: "*", syntax.OpPlus: "+", syntax.OpQuest: "?"}[re.Op])
	case syntax.OpRepeat:
		if re.Min > 255 || re.Max > 255 {
			return fmt.Errorf("repetition count above 255 (PostgreSQL's limit)")
		}
		b.WriteString("(?:")
		if err := emit(b, re.Sub[0]); err != nil {
			return err
		}
		b.WriteString(")")
		switch {
		case re.Max == -1:
			fmt.Fprintf(b, "{%d,}", re.Min)
		case re.Min == re.Max:
			fmt.Fprintf(b, "{%d}", re.Min)
		default:
			fmt.Fprintf(b, "{%d,%d}", re.Min, re.Max)
		}
	case syntax.OpConcat:
		b.WriteString("(?:")
		for _, s := range re.Sub {
			if err := emit(b, s); err != nil {
				return err
			}
		}
		b.WriteString(")")
	case syntax.OpAlternate:
		b.WriteString("(?:")
		for i, s := range re.Sub {
			if i > 0 {
				b.WriteString("|")
			}
			if err := emit(b, s); err != nil {
				return err
			}
		}
		b.WriteString(")")
	default:
		return fmt.Errorf("regular expression operator %v has no PostgreSQL equivalent", re.Op)
	}
	return nil
}

// foldClass is the ranges of r and every rune it folds to.
func foldClass(r rune) []rune {
	var out []rune
	for f := r; ; {
		out = append(out, f, f)
		f = unicode.SimpleFold(f)
		if f == r {
			break
		}
	}
	return out
}

// class writes a bracket expression of code point ranges (pairs lo, hi),
// each bound as an escape, so nothing in it is special.
func class(b *strings.Builder, ranges []rune) {
	if len(ranges) == 0 {
		b.WriteString(`[^\U00000001-\U0010ffff]`)
		return
	}
	b.WriteString("[")
	for i := 0; i+1 < len(ranges); i += 2 {
		esc(b, ranges[i])
		if ranges[i+1] != ranges[i] {
			b.WriteString("-")
			esc(b, ranges[i+1])
		}
	}
	b.WriteString("]")
}

func literal(b *strings.Builder, r rune) {
	if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == ' ' || r == '_') {
		b.WriteRune(r)
		return
	}
	esc(b, r)
}

// esc writes r as a PostgreSQL ARE escape, \U and eight hexadecimal digits,
// valid inside and outside bracket expressions.
func esc(b *strings.Builder, r rune) {
	if r == 0 {
		r = 1 // text never holds U+0000
	}
	fmt.Fprintf(b, `\U%08x`, r)
}
