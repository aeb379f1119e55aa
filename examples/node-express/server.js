// Runs the example: DATABASE_URL (a role granted notifyd_app, with INSERT on
// comments), NOTIFYD_TOKEN_SECRET (notifyd's http.token_secret), PORT.
const pg = require("pg");
const { createApp } = require("./app");

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const app = createApp(pool, { tokenSecret: process.env.NOTIFYD_TOKEN_SECRET });
const port = Number(process.env.PORT ?? 3000);
app.listen(port, "127.0.0.1", () => console.log(`listening on http://127.0.0.1:${port}`));
