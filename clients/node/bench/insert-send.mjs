// The Node client's bench row: transactions/s of "INSERT a row + send" vs
// "INSERT a row + INSERT INTO river_job" (what an application using River
// from another language does), same client, same connection count. Run by
// `go run ./bench -only httpsend` (its -client-cmd, bench/clients.sh) with
// DATABASE_URL (a fresh migrated database, the notifier catalog published,
// no workers) and BENCH_CONC; prints "row <name> <measured> <baseline> <target>".
// BENCH_CLIENT_N sets the transactions per run (default 5000).
import pg from "pg";
import { send } from "@notifyd/client";

const url = process.env.DATABASE_URL;
const conc = Number(process.env.BENCH_CONC ?? 8);
const n = Number(process.env.BENCH_CLIENT_N ?? 5000);
const rounds = 3;
const params = { actor: "ada", item: "post-9" };

const pool = new pg.Pool({ connectionString: url, max: conc });
await pool.query("CREATE TABLE IF NOT EXISTS bench_client_rows (id bigserial PRIMARY KEY, body text NOT NULL)");

// The baseline's job: one row as River's own insert writes it (no worker
// runs it here, as no daemon runs the sends).
const riverInsert = `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at, tags, metadata)
  VALUES ($1, 'bench.noop', 25, 1, 'default', 'available', now(), '{}', '{}')`;

let seq = 0;
async function run(withSend) {
  const clients = await Promise.all(Array.from({ length: conc }, () => pool.connect()));
  let next = 0;
  const t0 = process.hrtime.bigint();
  await Promise.all(
    clients.map(async (c) => {
      for (;;) {
        const i = next++;
        if (i >= n) return;
        await c.query("BEGIN");
        await c.query("INSERT INTO bench_client_rows (body) VALUES ($1)", [`row ${i}`]);
        if (withSend) {
          await send(c, { notifier: "bench.inapp", key: `node-${seq++}`, recipients: [`u${(i % 1000) + 1}`], params });
        } else {
          await c.query(riverInsert, [JSON.stringify({ row: i, recipient: `u${(i % 1000) + 1}`, params })]);
        }
        await c.query("COMMIT");
      }
    }),
  );
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  clients.forEach((c) => c.release());
  return n / secs;
}

await run(true); // warm-up: connections, plans, the catalog
const best = [0, 0];
for (let r = 1; r <= rounds; r++) {
  for (const withSend of [false, true]) {
    const rate = await run(withSend);
    console.log(`  node round ${r}: ${withSend ? "INSERT + send" : "INSERT + river_job"}: ${rate.toFixed(0)} tx/s`);
    best[withSend ? 1 : 0] = Math.max(best[withSend ? 1 : 0], rate);
  }
}
console.log(`row node:INSERT+send_vs_INSERT+river_job ${best[1].toFixed(1)} ${best[0].toFixed(1)} 0.7`);
await pool.end();
