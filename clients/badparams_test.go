package clients_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/notifyd/notifyd/internal/testing/badparams"
	"github.com/notifyd/notifyd/server/servertest"
)

// rubyBadParams sends each case of the table through Notifyd.notify in a
// transaction, and prints a line per case: the pointer of the InputError it
// raised (its detail), "ok" when it passed, or the error's class otherwise.
const rubyBadParams = `
require "json"
require "pg"
require "notifyd"
conn = PG.connect(ENV.fetch("NOTIFYD_TEST_APP_URL"))
JSON.parse(File.read(ARGV[0])).each_with_index do |c, i|
  begin
    conn.transaction do |tx|
      Notifyd.notify(tx, notifier: ARGV[1], key: "bad-#{i}", recipients: ["u1"], params: JSON.parse(c["params"]))
    end
    puts "ok"
  rescue Notifyd::InputError => e
    puts(e.field == "params" && e.sqlstate == "22023" ? "at #{e.detail}" : "#{e.field} #{e.sqlstate}")
  rescue => e
    puts e.class.name
  end
end
`

// The Ruby client refuses the shared table of bad params with an InputError
// at the pointer the HTTP API names (internal/httpapi's
// TestSQLAPIChecksEveryParamsKeywordAsHTTPDoes sends the same table through
// HTTP, SQL and the Go API), and passes its good params.
func TestRubyClientRefusesTheBadParamsTable(t *testing.T) {
	t.Parallel()
	ruby, err := exec.LookPath("ruby")
	if err != nil {
		missing(t, "ruby is not installed: install Debian's ruby and ruby-pg")
	}
	if err := exec.Command(ruby, "-e", "require 'pg'").Run(); err != nil {
		missing(t, "ruby cannot require pg: install Debian's ruby-pg")
	}
	env := startDaemonWith(t, servertest.BaseConfig+badparams.Config)
	raw, err := json.Marshal(badparams.Cases)
	if err != nil {
		t.Fatal(err)
	}
	table := filepath.Join(t.TempDir(), "cases.json")
	if err := os.WriteFile(table, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ruby, "-Ilib", "-e", rubyBadParams, table, badparams.Notifier)
	cmd.Dir = "ruby"
	cmd.Env = env.environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ruby: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(badparams.Cases) {
		t.Fatalf("ruby printed %d lines for %d cases:\n%s", len(lines), len(badparams.Cases), out)
	}
	for i, c := range badparams.Cases {
		want := "ok"
		if c.Pointer != "" {
			want = "at " + c.Pointer
		}
		if lines[i] != want {
			t.Errorf("%s: ruby says %q, want %q", c.Params, lines[i], want)
		}
	}
}
