package templates

import "testing"

func TestMissingKeysRenderEmpty(t *testing.T) {
	t.Parallel()

	// With a plain text/template, a missing key of a map[string]any prints
	// "<no value>" even under missingkey=zero.
	tests := []struct {
		src, want string
	}{
		{"[{{.nope}}]", "[]"},
		{"[{{.nope | printf \"%v\"}}]", "[<nil>]"},
		{"[{{$x := .nope}}{{$x}}]", "[]"},
		{"[{{if .nope}}yes{{else}}{{.nope}}no{{end}}]", "[no]"},
		{"[{{with .a}}{{.b}}{{else}}{{.c}}{{end}}]", "[]"},
		{"[{{range .l}}{{.x}}{{end}}]", "[]"},
		{"[{{.n}} {{.s}} {{.t}}]", "[1.5 s true]"},
		{"{{define \"t\"}}({{.nope}}){{end}}[{{template \"t\" .}}]", "[()]"},
	}
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			t.Parallel()
			tmpl, err := ParseText("t.test", tc.src)
			if err != nil {
				t.Fatal(err)
			}
			got, err := execText(tmpl, map[string]any{"n": 1.5, "s": "s", "t": true, "l": []any{map[string]any{}}})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
