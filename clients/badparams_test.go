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

const pythonBadParams = `
import json, sys
import psycopg
import notifyd
conn = psycopg.connect(__import__("os").environ["NOTIFYD_TEST_APP_URL"])
for i, c in enumerate(json.load(open(sys.argv[1]))):
    try:
        with conn.transaction():
            notifyd.send(conn, notifyd.Notification(notifier=sys.argv[2], key=f"bad-{i}", recipients=["u1"],
                                                    params=json.loads(c["params"])))
        print("ok")
    except notifyd.InputError as e:
        print(f"at {e.detail}" if e.field == "params" and e.sqlstate == "22023" else f"{e.field} {e.sqlstate}")
    except Exception as e:
        print(type(e).__name__)
`

const nodeBadParams = `
const fs = require("fs");
const pg = require("pg");
const notifyd = require("./lib/index.js");
(async () => {
  const client = new pg.Client({ connectionString: process.env.NOTIFYD_TEST_APP_URL });
  await client.connect();
  const cases = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
  for (const [i, c] of cases.entries()) {
    await client.query("BEGIN");
    try {
      await notifyd.send(client, { notifier: process.argv[2], key: "bad-" + i, recipients: ["u1"], params: JSON.parse(c.params) });
      await client.query("COMMIT");
      console.log("ok");
    } catch (e) {
      await client.query("ROLLBACK");
      if (e instanceof notifyd.InputError) {
        console.log(e.field === "params" && e.sqlstate === "22023" ? "at " + e.detail : e.field + " " + e.sqlstate);
      } else {
        console.log(e && e.constructor ? e.constructor.name : String(e));
      }
    }
  }
  await client.end();
})().catch((e) => { console.error(e); process.exit(1); });
`

// The Node, Ruby and Python clients refuse the shared table of bad params with
// their InputError at the pointer the HTTP API names (internal/httpapi's
// TestSQLAPIChecksEveryParamsKeywordAsHTTPDoes sends the same table through
// HTTP, SQL and the Go API), and pass its good params.
func TestClientsRefuseTheBadParamsTable(t *testing.T) {
	t.Parallel()
	env := startDaemonWith(t, servertest.BaseConfig+badparams.Config)
	raw, err := json.Marshal(badparams.Cases)
	if err != nil {
		t.Fatal(err)
	}
	table := filepath.Join(t.TempDir(), "cases.json")
	if err := os.WriteFile(table, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("node", func(t *testing.T) {
		node, err := exec.LookPath("node")
		if err != nil {
			missing(t, "node (Node.js 20 or later) is not installed")
		}
		if _, err := os.Stat(filepath.Join("node", "node_modules", "pg")); err != nil {
			missing(t, "clients/node/node_modules is missing: run `npm ci` in clients/node")
		}
		checkBadParams(t, env, "node", node, "-e", nodeBadParams, table, badparams.Notifier)
	})
	t.Run("ruby", func(t *testing.T) {
		ruby, err := exec.LookPath("ruby")
		if err != nil {
			missing(t, "ruby is not installed: install Debian's ruby and ruby-pg")
		}
		if err := exec.Command(ruby, "-e", "require 'pg'").Run(); err != nil {
			missing(t, "ruby cannot require pg: install Debian's ruby-pg")
		}
		checkBadParams(t, env, "ruby", ruby, "-Ilib", "-e", rubyBadParams, table, badparams.Notifier)
	})
	t.Run("python", func(t *testing.T) {
		python := "/usr/bin/python3"
		if p := os.Getenv("NOTIFYD_PYTHON"); p != "" {
			python = p
		}
		if err := exec.Command(python, "-c", "import psycopg").Run(); err != nil {
			missing(t, python+" cannot import psycopg: install Debian's python3-psycopg, or set NOTIFYD_PYTHON")
		}
		checkBadParams(t, env, "python", python, "-c", pythonBadParams, table, badparams.Notifier)
	})
}

// checkBadParams runs a client's script over the table in dir and checks it
// printed, for each case, "at <pointer>" or "ok" as the case says.
func checkBadParams(t *testing.T, env clientEnv, dir string, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env.environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", dir, err, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != len(badparams.Cases) {
		t.Fatalf("%s printed %d lines for %d cases:\n%s", dir, len(lines), len(badparams.Cases), out)
	}
	for i, c := range badparams.Cases {
		want := "ok"
		if c.Pointer != "" {
			want = "at " + c.Pointer
		}
		if lines[i] != want {
			t.Errorf("%s: %s says %q, want %q", c.Params, dir, lines[i], want)
		}
	}
}
