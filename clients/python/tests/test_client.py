"""The Python client against a real notifyd: clients/clients_test.go starts a
daemon on a fresh database and runs these tests with its URL in
NOTIFYD_TEST_DATABASE_URL (``make test`` does this)."""

import os
import time
import unittest

import psycopg

import notifyd
import notifyd.aio

URL = os.environ.get("NOTIFYD_TEST_DATABASE_URL")
if not URL:
    raise RuntimeError("NOTIFYD_TEST_DATABASE_URL is not set: run these tests through `go test ./clients/`")

PARAMS = {"post_title": "Hello", "author_name": "Ada"}


def scalar(sql, *args):
    with psycopg.connect(URL, autocommit=True) as conn:
        row = conn.execute(sql, args).fetchone()
        return row[0] if row else None


def wait_for(sql, *args, timeout=30.0):
    """Poll until sql returns a row (a fan-out on a loaded machine) and return it."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(URL, autocommit=True) as conn:
        while True:
            row = conn.execute(sql, args).fetchone()
            if row is not None:
                return row
            if time.monotonic() > deadline:
                raise AssertionError(f"no row after {timeout} s: {sql} {args}")
            time.sleep(0.05)  # polling interval


class SyncClientTest(unittest.TestCase):
    def test_rolled_back_nothing_is_sent(self):
        with psycopg.connect(URL) as conn:
            res = notifyd.send(conn, notifyd.Notification(
                notifier="comment.created", key="py-rollback", recipients=["py-u1"], params=PARAMS))
            self.assertFalse(res.duplicate)
            inside = conn.execute("SELECT count(*) FROM river_job WHERE args->>'notification_id' = %s",
                                  [res.id]).fetchone()[0]
            self.assertEqual(inside, 1, "the fan-out job exists inside the transaction")
            conn.rollback()
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE id = %s", res.id), 0)
        self.assertEqual(scalar("SELECT count(*) FROM river_job WHERE args->>'notification_id' = %s", res.id), 0)

    def test_committed_the_inbox_item_appears(self):
        with psycopg.connect(URL) as conn:  # commits on leaving the block
            res = notifyd.send(conn, notifyd.Notification(
                notifier="comment.created", key="py-commit",
                recipients=[notifyd.Recipient("py-u2", reason="author"), "py-u3"], actor="py-u9", params=PARAMS))
        self.assertRegex(res.id, r"^[0-9a-f]{8}-[0-9a-f]{4}-7")
        title, reason = wait_for("SELECT title, reason FROM notify_inbox WHERE recipient = %s AND key = %s",
                                 "py-u2", "py-commit")
        self.assertEqual(title, "Ada commented on Hello")
        self.assertEqual(reason, "author")
        wait_for("SELECT 1 FROM notify_inbox WHERE recipient = %s AND key = %s", "py-u3", "py-commit")

    def test_duplicates_return_the_first_id(self):
        n = notifyd.Notification(notifier="comment.created", key="py-dup", recipients=["py-u4"], params=PARAMS)
        with psycopg.connect(URL) as conn:
            first = notifyd.send(conn, n)
        with psycopg.connect(URL) as conn, conn.cursor() as cur:  # a cursor works too
            again = notifyd.send(cur, notifyd.Notification(notifier="comment.created", key="py-dup",
                                                           recipients=["py-u5"], params=PARAMS))
        self.assertEqual(again, notifyd.SendResult(id=first.id, duplicate=True))
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'py-dup'"), 1)

    def test_unknown_notifier_is_refused_at_once(self):
        with psycopg.connect(URL) as conn:
            with self.assertRaises(notifyd.UnknownNotifierError) as ctx:
                notifyd.send(conn, notifyd.Notification(notifier="no.such", key="py-unknown", recipients=["py-u1"]))
            conn.rollback()
        self.assertEqual(ctx.exception.field, "notifier")
        self.assertIn('unknown notifier "no.such"', str(ctx.exception))
        self.assertEqual(ctx.exception.__cause__.sqlstate, "22023")
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'py-unknown'"), 0)

    def test_malformed_input_names_the_field(self):
        with psycopg.connect(URL) as conn:
            # A savepoint keeps the application's transaction usable.
            with self.assertRaises(notifyd.InputError) as ctx, conn.transaction():
                notifyd.send(conn, notifyd.Notification(notifier="comment.created", key="py-bad",
                                                        recipients=["py-u1", notifyd.Recipient("")]))
            self.assertEqual(conn.execute("SELECT 1").fetchone()[0], 1)
        self.assertNotIsInstance(ctx.exception, notifyd.UnknownNotifierError)
        self.assertEqual(ctx.exception.field, "recipients[1].id")
        self.assertEqual(str(ctx.exception), "recipients[1].id: is required")
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'py-bad'"), 0)

    def test_subscribe_send_unsubscribe_cancel(self):
        with psycopg.connect(URL) as conn:
            self.assertTrue(notifyd.subscribe(conn, "py-topic", "py-u6"))
            self.assertFalse(notifyd.subscribe(conn, "py-topic", "py-u6", "watching"))
        with psycopg.connect(URL) as conn:
            notifyd.send(conn, notifyd.Notification(notifier="comment.created", key="py-topic-1",
                                                    topics=["py-topic"], params=PARAMS))
        (reason,) = wait_for("SELECT reason FROM notify_inbox WHERE recipient = %s AND key = %s",
                             "py-u6", "py-topic-1")
        self.assertEqual(reason, "watching")
        with psycopg.connect(URL) as conn:
            self.assertTrue(notifyd.unsubscribe(conn, "py-topic", "py-u6"))
            self.assertFalse(notifyd.unsubscribe(conn, "py-topic", "py-u6"))
            self.assertIsNone(notifyd.cancel(conn, "comment.created", "py-never-sent"))
            self.assertEqual(notifyd.cancel(conn, "comment.created", "py-topic-1"), 1)  # the inbox item
        self.assertEqual(scalar("SELECT count(*) FROM notify_inbox WHERE key = 'py-topic-1'"), 0)


class AsyncClientTest(unittest.IsolatedAsyncioTestCase):
    async def test_rolled_back_then_committed(self):
        n = notifyd.Notification(notifier="comment.created", key="py-async", recipients=["py-a1"], params=PARAMS)
        async with await psycopg.AsyncConnection.connect(URL) as conn:
            rolled = await notifyd.aio.send(conn, n)
            await conn.rollback()
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE id = %s", rolled.id), 0)
        async with await psycopg.AsyncConnection.connect(URL) as conn:
            res = await notifyd.aio.send(conn, n)
        self.assertFalse(res.duplicate)
        self.assertNotEqual(res.id, rolled.id)
        wait_for("SELECT 1 FROM notify_inbox WHERE recipient = %s AND key = %s", "py-a1", "py-async")
        async with await psycopg.AsyncConnection.connect(URL) as conn:
            async with conn.cursor() as cur:
                again = await notifyd.aio.send(cur, n)
        self.assertEqual(again, notifyd.SendResult(id=res.id, duplicate=True))

    async def test_errors_and_subscriptions(self):
        async with await psycopg.AsyncConnection.connect(URL) as conn:
            with self.assertRaises(notifyd.UnknownNotifierError):
                await notifyd.aio.send(conn, notifyd.Notification(notifier="no.such", key="k", recipients=["x"]))
            await conn.rollback()
            with self.assertRaises(notifyd.InputError) as ctx:
                await notifyd.aio.subscribe(conn, "py-topic-2", "py-a2", "two words")
            await conn.rollback()
            self.assertEqual(ctx.exception.field, "reason")
            self.assertTrue(await notifyd.aio.subscribe(conn, "py-topic-2", "py-a2"))
            self.assertTrue(await notifyd.aio.unsubscribe(conn, "py-topic-2", "py-a2"))
            self.assertIsNone(await notifyd.aio.cancel(conn, "comment.created", "py-never"))


if __name__ == "__main__":
    unittest.main()
