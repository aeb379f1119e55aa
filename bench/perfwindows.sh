#!/bin/sh
# perfwindows.sh OUT [bench flags...] runs the bench with perf sampling its
# PostgreSQL server (the postmaster and every backend it starts), and writes
# OUT.perf.data, OUT.bench.txt, OUT.windows (the profiled windows: the
# measured sections of the fan-out, email and its no-op baseline, commit →
# email, stream latency, digest and inbox scenarios) and, for each window,
# OUT.<window>.txt: perf's report of that window alone, by function with its
# callees ("children"). PostgreSQL builds without debug symbols still name
# their exported functions, which is enough to tell planning from execution
# and index maintenance from scans. Needs perf, run as root.
set -eu
out=$1
shift
rm -f "$out.windows"
go build -o "$out.bench" ./bench
"$out.bench" -windows "$out.windows" "$@" >"$out.bench.txt" 2>&1 &
bench=$!
# The server is final once the bench prints its settings (-profile restarts it
# once before that).
until grep -q '^PostgreSQL (private' "$out.bench.txt" 2>/dev/null; do
	kill -0 "$bench" 2>/dev/null || { cat "$out.bench.txt"; exit 1; }
	sleep 0.2
done
pm=$(pgrep -P "$bench" -x postgres | head -n 1)
perf record -k CLOCK_MONOTONIC -g -F 999 -p "$pm" -o "$out.perf.data" >"$out.perf.log" 2>&1 &
perf=$!
wait "$bench" || true
kill -INT "$perf" 2>/dev/null || true
wait "$perf" || true
rm -f "$out.bench"
while read -r name start end; do
	perf report -i "$out.perf.data" --time "$start,$end" --children --sort symbol -g none 2>/dev/null |
		grep -v '^#' | grep -v '^$' >"$out.$name.txt" || true
	echo "$out.$name.txt"
done <"$out.windows"
tail -n 30 "$out.bench.txt"
