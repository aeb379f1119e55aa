// What clients/clients_test.go gives the tests: a running notifyd, the
// database as the application's role (only notifyd_app, plus its own table
// comments) and as notifyd's owner (to check what was written).
import { Pool, PoolClient } from "pg";

function need(name: string): string {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: run these tests through \`go test ./clients/\` (make test does)`);
  }
  return v;
}

export const appURL = need("NOTIFYD_TEST_APP_URL");
export const ownerURL = need("NOTIFYD_TEST_DATABASE_URL");
export const api = need("NOTIFYD_TEST_API");
export const tokenSecret = need("NOTIFYD_TEST_TOKEN_SECRET");
export const typesDir = need("NOTIFYD_TEST_TYPES_DIR");

/** The application's pool: a role that holds only notifyd_app. */
export const app = new Pool({ connectionString: appURL, max: 4 });
/** notifyd's owner, to read what was written. */
export const owner = new Pool({ connectionString: ownerURL, max: 2 });

/** inTx runs fn in a transaction on one client of the app pool, committing unless told to roll back. */
export async function inTx<T>(fn: (c: PoolClient) => Promise<T>, commit = true): Promise<T> {
  const c = await app.connect();
  try {
    await c.query("BEGIN");
    const res = await fn(c);
    await c.query(commit ? "COMMIT" : "ROLLBACK");
    return res;
  } catch (err) {
    await c.query("ROLLBACK");
    throw err;
  } finally {
    c.release();
  }
}

/** count returns the number of rows sql returns, read as notifyd's owner. */
export async function count(sql: string, values: unknown[]): Promise<number> {
  const res = await owner.query(`SELECT count(*)::int AS n FROM (${sql}) q`, values);
  return res.rows[0].n;
}

/** waitFor polls (as the owner) until sql returns a row, for at most 30 s (a fan-out on a loaded machine), and returns it. */
export async function waitFor(sql: string, values: unknown[]): Promise<any> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const res = await owner.query(sql, values);
    if (res.rows.length > 0) {
      return res.rows[0];
    }
    if (Date.now() > deadline) {
      throw new Error(`no row after 30 s: ${sql} ${JSON.stringify(values)}`);
    }
    await new Promise((r) => setTimeout(r, 50)); // polling interval
  }
}
