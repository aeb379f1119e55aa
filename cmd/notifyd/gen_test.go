package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `notifyd gen types` writes the params types of the config's notifiers in
// the language asked for, to -o or standard output.
func TestGenTypes(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, "gen", "types", "-lang", "ts", "-config", "../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"export interface CommentCreatedParams {", `"invoice.paid": InvoicePaidParams;`,
		`currency: "EUR" | "USD" | "GBP";`, "export type NotifierName = keyof Notifiers;"} {
		if !strings.Contains(out, want) {
			t.Errorf("ts output lacks %q:\n%s", want, out)
		}
	}
	file := filepath.Join(t.TempDir(), "notifiers.go")
	if out, _, err := run(t, "gen", "types", "-lang", "go", "-package", "acme", "-o", file, "-config", "../../config.example.yaml"); err != nil || out != "" {
		t.Fatalf("gen types -o: %q, %v", out, err)
	}
	src, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(src), "package acme") || !strings.Contains(string(src), "type InvoicePaidParams struct") {
		t.Fatalf("%s: %v\n%s", file, err, src)
	}
	for _, args := range [][]string{{"gen"}, {"gen", "schemas"}, {"gen", "types"}, {"gen", "types", "-lang", "rust", "-config", "../../config.example.yaml"}} {
		if _, _, err := run(t, args...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
