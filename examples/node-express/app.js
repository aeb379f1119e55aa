// An Express app whose route writes the application's row and sends its
// notification in one PostgreSQL transaction: both commit, or neither does.
const express = require("express");
const { send, recipientToken, InputError } = require("@notifyd/client");

/**
 * createApp builds the app on a pg.Pool. The pool is only used to check a
 * client out: the transaction runs on that one client.
 */
function createApp(pool, { tokenSecret } = {}) {
  const app = express();
  app.use(express.json());

  // POST /posts/:postId/comments {"body", "author", "author_name", "post_title", "watchers": [ids]}
  app.post("/posts/:postId/comments", async (req, res, next) => {
    const postId = Number(req.params.postId);
    const { body, author, author_name, post_title, watchers = [] } = req.body ?? {};
    const client = await pool.connect();
    try {
      await client.query("BEGIN");
      const { rows } = await client.query("INSERT INTO comments (post_id, body) VALUES ($1, $2) RETURNING id", [postId, body]);
      const commentId = rows[0].id;
      const notification = await send(client, {
        notifier: "comment.created",
        key: `comment-${commentId}`,
        recipients: watchers,
        topics: [`post-${postId}`],
        actor: author,
        params: { post_title, author_name },
      });
      await client.query("COMMIT");
      res.status(201).json({ id: Number(commentId), notification: notification.id });
    } catch (err) {
      await client.query("ROLLBACK");
      if (err instanceof InputError) {
        // Nothing was written: not the comment, not the notification.
        res.status(422).json({ error: err.message, field: err.field });
        return;
      }
      next(err);
    } finally {
      client.release();
    }
  });

  // GET /notifyd-token?user=u2: the token the user's browser gives notifyd's
  // inbox component. A real app takes the user from its session.
  app.get("/notifyd-token", (req, res) => {
    res.json({ token: recipientToken(tokenSecret, String(req.query.user), 3600) });
  });

  return app;
}

module.exports = { createApp };
