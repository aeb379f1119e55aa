#!/bin/sh
# The client packages' bench rows, "INSERT a row + send" vs "INSERT a row":
#   go run ./bench -only httpsend -client-cmd 'sh bench/clients.sh'
# The bench sets DATABASE_URL and BENCH_CONC; each script prints its row.
# Node needs `npm ci` in clients/node; Python needs Debian's python3-psycopg.
set -e
cd "$(dirname "$0")/.."
node clients/node/bench/insert-send.mjs
"${NOTIFYD_PYTHON:-/usr/bin/python3}" clients/python/bench/insert_send.py
