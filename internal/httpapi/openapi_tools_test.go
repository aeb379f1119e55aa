package httpapi_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The API document is for tools, so the common ones must take it at their
// default settings: openapi-typescript and oapi-codegen generate from it, and
// redocly lint (its recommended rules) finds no error. Their versions are
// pinned in testdata/openapi-tools: package-lock.json (installed there with
// npm ci; .ci/run does it) and a go.mod of its own, so that the main module
// does not depend on oapi-codegen. Under CI=true a missing tool fails the
// test; elsewhere the test skips with what to install.

const toolsDir = "testdata/openapi-tools"

func toolMissing(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// runTool runs name in toolsDir and returns its output; a non-zero exit fails t.
func runTool(t *testing.T, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = toolsDir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func npmTools(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		toolMissing(t, "node is not installed: the OpenAPI tools test did not run (apt-get install nodejs npm)")
	}
	bin := filepath.Join(toolsDir, "node_modules", ".bin")
	if _, err := os.Stat(bin); err != nil {
		toolMissing(t, "the OpenAPI tools are not installed: run npm ci in internal/httpapi/"+toolsDir)
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func TestOpenAPIWithOpenAPITypeScript(t *testing.T) {
	t.Parallel()
	bin := npmTools(t)
	out := filepath.Join(t.TempDir(), "api.d.ts")
	runTool(t, 2*time.Minute, filepath.Join(bin, "openapi-typescript"), "../../openapi.json", "-o", out)
	ts, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"/v1/notifications"`, "NotificationRequest", "InboxStreamEvent", `"/riverui/{path}"`} {
		if !bytes.Contains(ts, []byte(want)) {
			t.Errorf("openapi-typescript's output has no %s", want)
		}
	}
}

func TestOpenAPIWithRedoclyLint(t *testing.T) {
	t.Parallel()
	bin := npmTools(t)
	// redocly exits non-zero when it finds an error; warnings are reported
	// and allowed.
	out := runTool(t, 2*time.Minute, filepath.Join(bin, "redocly"), "lint", "--format", "summary", "../../openapi.json")
	if !strings.Contains(out, "valid") {
		t.Fatalf("redocly lint did not say the document is valid:\n%s", out)
	}
}

func TestOpenAPIWithOAPICodegen(t *testing.T) {
	t.Parallel()
	gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			toolMissing(t, "go is not on PATH: oapi-codegen did not run")
		}
	}
	// Fetching the pinned module needs the module proxy (or a warm cache).
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dl := exec.CommandContext(ctx, gobin, "mod", "download")
	dl.Dir = toolsDir
	if out, err := dl.CombinedOutput(); err != nil {
		toolMissing(t, "oapi-codegen's module could not be downloaded (go mod download in internal/httpapi/"+toolsDir+"): "+
			err.Error()+"\n"+string(out))
	}
	code := runTool(t, 5*time.Minute, gobin, "tool", "oapi-codegen", "-package", "notifydapi", "../../openapi.json")
	for _, want := range []string{"package notifydapi", "type NotificationRequest struct", "type DeliveryDetail struct"} {
		if !strings.Contains(code, want) {
			t.Errorf("oapi-codegen's output has no %q", want)
		}
	}
}
