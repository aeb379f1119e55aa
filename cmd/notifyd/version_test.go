package main

import (
	"os"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/internal/version"
)

func TestVersionCommand(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	if want := "notifyd " + version.Version; !strings.HasPrefix(out, want) {
		t.Fatalf("version = %q, want it to start with %q", out, want)
	}
	if _, _, err := run(t, "version", "extra"); err == nil {
		t.Fatal("version with an argument succeeded")
	}
}

// TestVersionFile keeps the VERSION file, which `make build` and `make image`
// stamp into the binary, equal to the version a plain go build carries, and
// names it in CHANGELOG.md.
func TestVersionFile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != version.Version {
		t.Fatalf("VERSION says %q, internal/version.Version %q: release both together", got, version.Version)
	}
	cl, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cl), "## ["+version.Version+"]") {
		t.Fatalf("CHANGELOG.md has no section ## [%s]", version.Version)
	}
}
