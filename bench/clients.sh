#!/bin/sh
# The client packages' bench rows, "app INSERT + send" vs "app INSERT + one
# INSERT INTO river_job" (what an application using River from another
# language does), same client and connection count:
#   go run ./bench -only httpsend            (the default -client-cmd)
# The bench sets DATABASE_URL and BENCH_CONC; each script prints its row.
# A client that cannot run prints "fail <row> <what is missing>", which the
# bench turns into a failed row: never a row that silently disappears.
# Node: node, and clients/node's dependencies (installed here with `npm ci`
# when missing). Python: psycopg 3 (Debian's python3-psycopg) for
# ${NOTIFYD_PYTHON:-/usr/bin/python3}.
cd "$(dirname "$0")/.." || exit 1
node_row=node:INSERT+send_vs_INSERT+river_job
python_row=python:INSERT+send_vs_INSERT+river_job

if ! command -v node >/dev/null 2>&1; then
    echo "fail $node_row node is not installed"
elif [ ! -d clients/node/node_modules/pg ] &&
     ! { command -v npm >/dev/null 2>&1 && (cd clients/node && npm ci --prefer-offline --no-audit --no-fund >&2); }; then
    echo "fail $node_row clients/node has no node_modules and \`npm ci\` in clients/node failed (or npm is missing)"
else
    node clients/node/bench/insert-send.mjs || echo "fail $node_row clients/node/bench/insert-send.mjs exited with status $?"
fi

py="${NOTIFYD_PYTHON:-/usr/bin/python3}"
if ! "$py" -c 'import psycopg' >/dev/null 2>&1; then
    echo "fail $python_row $py cannot import psycopg (psycopg 3: Debian's python3-psycopg, or pip install psycopg)"
else
    "$py" clients/python/bench/insert_send.py || echo "fail $python_row clients/python/bench/insert_send.py exited with status $?"
fi
