package templates

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/text/feature/plural"
	"golang.org/x/text/language"
	"golang.org/x/text/number"
)

// A Message is one catalog entry parsed as ICU MessageFormat: text with
// {name} placeholders, {n, number}, {d, date, short|medium|long},
// {d, time, short}, {n, plural, =0 {…} one {…} other {…}} (# is the
// number, offset:N is supported) and {x, select, a {…} other {…}}. A quote
// escapes: ” is one ', and '{…}' is literal text.
type Message struct {
	src   string
	parts []msgPart
}

// msgPart is literal text (arg ""), a placeholder, or a plural/select.
type msgPart struct {
	text   string
	arg    string // the argument's name; "" for text, "#" for the plural number
	kind   string // "", "number", "date", "time", "plural", "select"
	style  string
	offset float64
	cases  map[string][]msgPart // plural/select: "=1", "one", "other", "male", …
	order  []string             // cases in source order
}

// ParseMessage parses src as a Message.
func ParseMessage(src string) (*Message, error) {
	p := &msgParser{src: src}
	parts, err := p.parts(false)
	if err != nil {
		return nil, err
	}
	if p.pos < len(src) {
		return nil, fmt.Errorf("unexpected } at offset %d", p.pos)
	}
	return &Message{src: src, parts: parts}, nil
}

type msgParser struct {
	src string
	pos int
}

// parts reads until the end, or until the } closing a case when inCase.
func (p *msgParser) parts(inCase bool) ([]msgPart, error) {
	var out []msgPart
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			out = append(out, msgPart{text: text.String()})
			text.Reset()
		}
	}
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == '\'':
			if p.pos+1 < len(p.src) && p.src[p.pos+1] == '\'' {
				text.WriteByte('\'')
				p.pos += 2
				continue
			}
			if p.pos+1 < len(p.src) && strings.ContainsRune("{}#", rune(p.src[p.pos+1])) {
				end := strings.IndexByte(p.src[p.pos+1:], '\'')
				if end < 0 {
					text.WriteString(p.src[p.pos+1:])
					p.pos = len(p.src)
					continue
				}
				text.WriteString(p.src[p.pos+1 : p.pos+1+end])
				p.pos += end + 2
				continue
			}
			text.WriteByte(c)
			p.pos++
		case c == '{':
			flush()
			part, err := p.placeholder()
			if err != nil {
				return nil, err
			}
			out = append(out, part)
		case c == '}':
			if !inCase {
				return nil, fmt.Errorf("unexpected } at offset %d", p.pos)
			}
			flush()
			return out, nil
		case c == '#' && inCase:
			flush()
			out = append(out, msgPart{arg: "#"})
			p.pos++
		default:
			text.WriteByte(c)
			p.pos++
		}
	}
	if inCase {
		return nil, fmt.Errorf("a case is not closed with }")
	}
	flush()
	return out, nil
}

func (p *msgParser) word() string {
	p.space()
	start := p.pos
	for p.pos < len(p.src) && !strings.ContainsRune(",{} \t\n", rune(p.src[p.pos])) {
		p.pos++
	}
	return p.src[start:p.pos]
}

func (p *msgParser) space() {
	for p.pos < len(p.src) && strings.ContainsRune(" \t\n\r", rune(p.src[p.pos])) {
		p.pos++
	}
}

func (p *msgParser) expect(c byte) error {
	p.space()
	if p.pos >= len(p.src) || p.src[p.pos] != c {
		return fmt.Errorf("want %q at offset %d", c, p.pos)
	}
	p.pos++
	return nil
}

// placeholder reads {name}, {name, type}, {name, type, style} or a
// plural/select with its cases.
func (p *msgParser) placeholder() (msgPart, error) {
	p.pos++ // {
	name := p.word()
	if name == "" {
		return msgPart{}, fmt.Errorf("placeholder without a name at offset %d", p.pos)
	}
	part := msgPart{arg: name}
	p.space()
	if p.pos < len(p.src) && p.src[p.pos] == '}' {
		p.pos++
		return part, nil
	}
	if err := p.expect(','); err != nil {
		return msgPart{}, err
	}
	part.kind = p.word()
	switch part.kind {
	case "number", "date", "time":
		p.space()
		if p.pos < len(p.src) && p.src[p.pos] == ',' {
			p.pos++
			part.style = p.word()
		}
		return part, p.expect('}')
	case "plural", "select", "selectordinal":
		if part.kind == "selectordinal" {
			part.kind = "plural"
			part.style = "ordinal"
		}
		if err := p.expect(','); err != nil {
			return msgPart{}, err
		}
		part.cases = map[string][]msgPart{}
		for {
			p.space()
			if p.pos < len(p.src) && p.src[p.pos] == '}' {
				p.pos++
				break
			}
			sel := p.word()
			if sel == "" {
				return msgPart{}, fmt.Errorf("%s of {%s} is not closed", part.kind, name)
			}
			if v, ok := strings.CutPrefix(sel, "offset:"); ok && part.kind == "plural" {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return msgPart{}, fmt.Errorf("bad offset %q", v)
				}
				part.offset = f
				continue
			}
			if err := p.expect('{'); err != nil {
				return msgPart{}, err
			}
			sub, err := p.parts(part.kind == "plural")
			if err != nil {
				return msgPart{}, err
			}
			if part.kind != "plural" {
				// # is plain text outside a plural.
				for i := range sub {
					if sub[i].arg == "#" {
						sub[i] = msgPart{text: "#"}
					}
				}
			}
			p.pos++ // the case's }
			if _, dup := part.cases[sel]; dup {
				return msgPart{}, fmt.Errorf("case %s of {%s} is given twice", sel, name)
			}
			part.cases[sel] = sub
			part.order = append(part.order, sel)
		}
		if _, ok := part.cases["other"]; !ok {
			return msgPart{}, fmt.Errorf("%s of {%s} has no other case", part.kind, name)
		}
		return part, nil
	}
	return msgPart{}, fmt.Errorf("unknown placeholder type %q in {%s}", part.kind, name)
}

// Placeholders returns the names of the arguments m uses, each once, in
// order of first use.
func (m *Message) Placeholders() []string {
	var out []string
	seen := map[string]bool{}
	var walk func([]msgPart)
	walk = func(ps []msgPart) {
		for _, p := range ps {
			if p.arg != "" && p.arg != "#" && !seen[p.arg] {
				seen[p.arg] = true
				out = append(out, p.arg)
			}
			for _, sel := range p.order {
				walk(p.cases[sel])
			}
		}
	}
	walk(m.parts)
	return out
}

// pluralCases returns, for every plural of m, its argument's name and the
// CLDR categories it gives a case to ("=N" cases left out).
func (m *Message) pluralCases() map[string][]string {
	out := map[string][]string{}
	var walk func([]msgPart)
	walk = func(ps []msgPart) {
		for _, p := range ps {
			if p.kind == "plural" && p.style != "ordinal" {
				for _, sel := range p.order {
					if !strings.HasPrefix(sel, "=") {
						out[p.arg] = append(out[p.arg], sel)
					}
				}
			}
			for _, sel := range p.order {
				walk(p.cases[sel])
			}
		}
	}
	walk(m.parts)
	return out
}

// String returns the message's source.
func (m *Message) String() string { return m.src }

// format renders m with args for loc.
func (m *Message) format(loc *Locale, args map[string]any) string {
	var b strings.Builder
	loc.formatParts(&b, m.parts, args, 0, false)
	return b.String()
}

func (loc *Locale) formatParts(b *strings.Builder, parts []msgPart, args map[string]any, n float64, inPlural bool) {
	for _, p := range parts {
		switch {
		case p.arg == "":
			b.WriteString(p.text)
		case p.arg == "#":
			if inPlural {
				b.WriteString(loc.Number(n))
			} else {
				b.WriteByte('#')
			}
		case p.kind == "plural":
			v, _ := toFloat(args[p.arg])
			sel := "other"
			if c, ok := p.cases["="+strconv.FormatFloat(v, 'f', -1, 64)]; ok {
				loc.formatParts(b, c, args, v-p.offset, true)
				continue
			}
			if cat := loc.PluralCategory(v - p.offset); p.cases[cat] != nil {
				sel = cat
			}
			loc.formatParts(b, p.cases[sel], args, v-p.offset, true)
		case p.kind == "select":
			sel := fmt.Sprint(args[p.arg])
			c, ok := p.cases[sel]
			if !ok {
				c = p.cases["other"]
			}
			loc.formatParts(b, c, args, n, inPlural)
		default:
			b.WriteString(loc.formatArg(args[p.arg], p.kind, p.style))
		}
	}
}

// formatArg formats one argument as its placeholder says: numbers and
// dates for the locale and zone, anything else as fmt prints it (nil as "").
func (loc *Locale) formatArg(v any, kind, style string) string {
	if v == nil {
		return ""
	}
	switch kind {
	case "number":
		if f, ok := toFloat(v); ok {
			if style == "percent" {
				return loc.printer.Sprint(number.Percent(f))
			}
			return loc.Number(f)
		}
	case "date", "time":
		if t, ok := toTime(v); ok {
			if kind == "time" {
				return loc.Time(t)
			}
			return loc.Date(t, style)
		}
	}
	if f, ok := v.(float64); ok {
		return loc.Number(f)
	}
	if t, ok := toTime(v); ok && kind == "" {
		if _, isString := v.(string); !isString {
			return loc.Date(t, "medium")
		}
	}
	return fmt.Sprint(v)
}

func toFloat(v any) (float64, bool) {
	switch v := v.(type) {
	case float64:
		return v, true
	case float32:
		return float64(v), true
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case int32:
		return float64(v), true
	case uint:
		return float64(v), true
	case uint64:
		return float64(v), true
	case interface{ Float64() (float64, error) }: // json.Number
		f, err := v.Float64()
		return f, err == nil
	case string:
		f, err := strconv.ParseFloat(v, 64)
		return f, err == nil
	}
	return 0, false
}

func toTime(v any) (time.Time, bool) {
	switch v := v.(type) {
	case time.Time:
		return v, true
	case *time.Time:
		if v != nil {
			return *v, true
		}
	case string:
		for _, layout := range []string{time.RFC3339Nano, time.DateTime, time.DateOnly} {
			if t, err := time.Parse(layout, v); err == nil {
				return t, true
			}
		}
	case float64: // Unix seconds
		sec := int64(v)
		return time.Unix(sec, int64((v-float64(sec))*1e9)), true
	}
	return time.Time{}, false
}

// pluralForms are the CLDR categories by x/text's Form.
var pluralForms = map[plural.Form]string{plural.Other: "other", plural.Zero: "zero", plural.One: "one",
	plural.Two: "two", plural.Few: "few", plural.Many: "many"}

// pluralCategory returns the CLDR cardinal category of n in tag.
func pluralCategory(tag language.Tag, n float64) string {
	if n < 0 {
		n = -n
	}
	s := strconv.FormatFloat(n, 'f', -1, 64)
	intPart, frac, _ := strings.Cut(s, ".")
	i, _ := strconv.Atoi(intPart)
	f, _ := strconv.Atoi("0" + frac)
	v := len(frac)
	// The number as written has no trailing zeros (FormatFloat drops them),
	// so w = v and t = f.
	return pluralForms[plural.Cardinal.MatchPlural(tag, i, v, v, f, f)]
}

// pluralCategories returns the cardinal categories tag distinguishes,
// "other" always among them, found by classifying integers and decimals.
func pluralCategories(tag language.Tag) []string {
	seen := map[string]bool{"other": true}
	for i := 0; i <= 1000; i++ {
		seen[pluralCategory(tag, float64(i))] = true
	}
	for _, x := range []float64{0.5, 1.5, 2.5, 0.1, 1.1, 10.5} {
		seen[pluralCategory(tag, x)] = true
	}
	var out []string
	for _, c := range []string{"zero", "one", "two", "few", "many", "other"} {
		if seen[c] {
			out = append(out, c)
		}
	}
	return out
}
