"""The Python client's bench row: transactions/s of "INSERT a row + send" vs
"INSERT a row + INSERT INTO river_job" (what an application using River from
another language does), same client (psycopg 3), same connection count. Run
by `go run ./bench -only httpsend` (its -client-cmd, bench/clients.sh) with
DATABASE_URL (a fresh migrated database, the notifier catalog published, no
workers) and BENCH_CONC; prints "row <name> <measured> <baseline> <target>".
BENCH_CLIENT_N sets the transactions per run (default 5000)."""

import itertools
import json
import os
import sys
import threading
import time

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import notifyd  # noqa: E402

URL = os.environ["DATABASE_URL"]
CONC = int(os.environ.get("BENCH_CONC", "8"))
N = int(os.environ.get("BENCH_CLIENT_N", "5000"))
ROUNDS = 3
PARAMS = {"actor": "ada", "item": "post-9"}
seq = itertools.count()
# The baseline's job: one row as River's own insert writes it (no worker runs
# it here, as no daemon runs the sends).
RIVER_INSERT = """INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at, tags, metadata)
VALUES (%s, 'bench.noop', 25, 1, 'default', 'available', now(), '{}', '{}')"""


def run(conns, with_send: bool) -> float:
    counter = itertools.count()

    def worker(conn: psycopg.Connection) -> None:
        while True:
            i = next(counter)
            if i >= N:
                return
            with conn.transaction():
                conn.execute("INSERT INTO bench_client_rows (body) VALUES (%s)", (f"row {i}",))
                if with_send:
                    notifyd.send(conn, notifyd.Notification(
                        notifier="bench.inapp", key=f"py-{next(seq)}", recipients=[f"u{i % 1000 + 1}"], params=PARAMS))
                else:
                    conn.execute(RIVER_INSERT, (json.dumps({"row": i, "recipient": f"u{i % 1000 + 1}", "params": PARAMS}),))

    threads = [threading.Thread(target=worker, args=(c,)) for c in conns]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return N / (time.perf_counter() - t0)


def main() -> None:
    with psycopg.connect(URL, autocommit=True) as c:
        c.execute("CREATE TABLE IF NOT EXISTS bench_client_rows (id bigserial PRIMARY KEY, body text NOT NULL)")
    conns = [psycopg.connect(URL, autocommit=True) for _ in range(CONC)]
    try:
        run(conns, True)  # warm-up
        best = [0.0, 0.0]
        for r in range(1, ROUNDS + 1):
            for with_send in (False, True):
                rate = run(conns, with_send)
                print(f"  python round {r}: {'INSERT + send' if with_send else 'INSERT + river_job'}: {rate:.0f} tx/s", flush=True)
                best[with_send] = max(best[with_send], rate)
        print(f"row python:INSERT+send_vs_INSERT+river_job {best[1]:.1f} {best[0]:.1f} 0.7")
    finally:
        for c in conns:
            c.close()


if __name__ == "__main__":
    main()
