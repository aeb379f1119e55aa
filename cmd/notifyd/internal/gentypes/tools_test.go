package gentypes_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// tool returns the path of a type checker, or skips the test when it is
// missing, except under CI=true, where a missing tool fails it.
func tool(t *testing.T, path, install string) string {
	t.Helper()
	if p, err := exec.LookPath(path); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
		return p
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("%s is missing (%s); under CI a missing tool fails the test", path, install)
	}
	t.Skipf("%s is missing (%s)", path, install)
	return ""
}

func run(t *testing.T, dir, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The generated TypeScript types a send: tsc refuses a notifier that is not
// in the config, a param of the wrong type, a misspelt or missing param and
// a value outside an enum, and accepts valid params (each refused call
// carries @ts-expect-error, which tsc fails when nothing is refused).
func TestTypeScriptUnderTsc(t *testing.T) {
	t.Parallel()
	tsc := tool(t, "../../../../clients/node/node_modules/.bin/tsc", "run npm ci in clients/node")
	dir := t.TempDir()
	write(t, dir, "notifiers.ts", generate(t, "ts"))
	const send = `import type { NotifierName, Notifiers } from "./notifiers";
declare function send<N extends NotifierName>(notifier: N, params: Notifiers[N]): void;
`
	write(t, dir, "use.ts", send+`
send("comment.created", { post_title: "Hi", author_name: "Ada", count: 2 });
send("invoice.paid", { amount: 9.5, currency: "EUR", lines: [{ sku: "a", qty: 1 }], note: null, customer: { id: "c1", "vat-id": "x" } });
send("team.joined", { anything: ["goes"] });
send("team_joined", { team: "t", extra: 1 });
send("mixed", { a: "x", b: 2 });
// @ts-expect-error a notifier that is not in the config
send("comment.craeted", { post_title: "Hi", author_name: "Ada" });
// @ts-expect-error a param of the wrong type
send("comment.created", { post_title: 1, author_name: "Ada" });
// @ts-expect-error a misspelt param
send("comment.created", { post_titel: "Hi", author_name: "Ada" });
// @ts-expect-error a missing required param
send("comment.created", { author_name: "Ada" });
// @ts-expect-error a value outside the enum
send("invoice.paid", { amount: 1, currency: "JPY", lines: [] });
// @ts-expect-error an item of the wrong shape
send("invoice.paid", { amount: 1, currency: "EUR", lines: [{ sku: "a", qty: "1" }] });
`)
	args := []string{"--noEmit", "--strict", "--target", "es2020", "--module", "commonjs", "notifiers.ts"}
	if out, err := run(t, dir, tsc, append(args, "use.ts")...); err != nil {
		t.Fatalf("tsc: %v\n%s", err, out)
	}
	// And the refusal is real: without @ts-expect-error, tsc fails.
	write(t, dir, "wrong.ts", send+`send("comment.craeted", { post_title: "Hi", author_name: "Ada" });
`)
	out, err := run(t, dir, tsc, append(args, "wrong.ts")...)
	if err == nil || !strings.Contains(out, `"comment.craeted"`) {
		t.Fatalf("tsc accepted a notifier that is not in the config: %v\n%s", err, out)
	}
}

// The generated Python types a send under mypy: params() refuses a notifier
// that is not in the config, a param of the wrong type, a misspelt or
// missing param and a value outside an enum, and accepts valid params (each
// refused call carries "type: ignore", which --warn-unused-ignores fails
// when nothing is refused).
func TestPythonUnderMypy(t *testing.T) {
	t.Parallel()
	mypy := tool(t, "mypy", "install Debian's mypy: apt-get install -y mypy")
	dir := t.TempDir()
	write(t, dir, "notifiers.py", generate(t, "python"))
	write(t, dir, "use.py", `from notifiers import InvoicePaidParams, params

params("comment.created", {"post_title": "Hi", "author_name": "Ada", "count": 2})
invoice: InvoicePaidParams = {"amount": 9.5, "currency": "EUR", "lines": [{"sku": "a", "qty": 1}], "note": None,
                              "customer": {"id": "c1", "vat-id": "x"}}
params("invoice.paid", invoice)
params("team.joined", {"anything": ["goes"]})
params("mixed", {"a": "x", "b": 2})
params("comment.craeted", {"post_title": "Hi", "author_name": "Ada"})  # type: ignore
params("comment.created", {"post_title": 1, "author_name": "Ada"})  # type: ignore
params("comment.created", {"post_titel": "Hi", "author_name": "Ada"})  # type: ignore
params("comment.created", {"author_name": "Ada"})  # type: ignore
params("invoice.paid", {"amount": 1, "currency": "JPY", "lines": []})  # type: ignore
params("invoice.paid", {"amount": 1, "currency": "EUR", "lines": [{"sku": "a", "qty": "1"}]})  # type: ignore
`)
	args := []string{"--strict", "--warn-unused-ignores", "--no-incremental", "--cache-dir", filepath.Join(dir, ".mypy_cache")}
	if out, err := run(t, dir, mypy, append(args, "notifiers.py", "use.py")...); err != nil {
		t.Fatalf("mypy: %v\n%s", err, out)
	}
	write(t, dir, "wrong.py", `from notifiers import params

params("comment.craeted", {"post_title": "Hi", "author_name": "Ada"})
`)
	out, err := run(t, dir, mypy, append(args, "notifiers.py", "wrong.py")...)
	if err == nil || !strings.Contains(out, "wrong.py:3") {
		t.Fatalf("mypy accepted a notifier that is not in the config: %v\n%s", err, out)
	}
}

// The generated RBS is valid for rbs (Ruby 3.1's, which Debian's ruby ships
// as rbs3.1): every type it names resolves; and rbs refuses a reference to a
// notifier's params type that is not there, so the check is real.
func TestRBSUnderRbs(t *testing.T) {
	t.Parallel()
	rbs := ""
	for _, name := range []string{"rbs", "rbs3.1"} {
		if p, err := exec.LookPath(name); err == nil {
			rbs = p
			break
		}
	}
	if rbs == "" {
		rbs = tool(t, "rbs", "install Debian's ruby, which ships rbs")
	}
	dir := t.TempDir()
	write(t, dir, "notifiers.rbs", generate(t, "rb"))
	write(t, dir, "use.rbs", "module Use\n  type a = ::Notifiers::invoice_paid_params\n  type b = ::Notifiers::notifier_name\nend\n")
	if out, err := run(t, dir, rbs, "-I", ".", "validate"); err != nil {
		t.Fatalf("rbs validate: %v\n%s", err, out)
	}
	write(t, dir, "use.rbs", "module Use\n  type a = ::Notifiers::invoice_payed_params\nend\n")
	if out, err := run(t, dir, rbs, "-I", ".", "validate"); err == nil {
		t.Fatalf("rbs accepted a params type that is not generated:\n%s", out)
	}
}
