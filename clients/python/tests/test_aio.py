"""notifyd.aio on psycopg 3's AsyncConnection, as the application's role."""

import unittest

import psycopg

import notifyd
import notifyd.aio
from tests.env import APP_URL, PARAMS, scalar, wait_for


class AsyncTest(unittest.IsolatedAsyncioTestCase):
    async def test_rollback_commit_duplicate_errors(self) -> None:
        n = notifyd.Notification(notifier="comment.created", key="py-aio", recipients=["py-a1"], params=PARAMS)
        async with await psycopg.AsyncConnection.connect(APP_URL) as conn:
            await conn.execute("INSERT INTO comments (id, body) VALUES (2101, 'rolled back')")
            first = await notifyd.aio.send(conn, n)
            await conn.rollback()
        self.assertEqual(scalar("SELECT count(*) FROM comments WHERE id = 2101"), 0)
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE id = %s", first.id), 0)

        async with await psycopg.AsyncConnection.connect(APP_URL) as conn:
            await conn.execute("INSERT INTO comments (id, body) VALUES (2102, 'committed')")
            res = await notifyd.aio.send(conn, n)
            self.assertFalse(res.duplicate)
        self.assertNotEqual(res.id, first.id)
        await_row = wait_for("SELECT 1 FROM notify_inbox WHERE recipient = 'py-a1' AND key = 'py-aio'")
        self.assertEqual(await_row, (1,))

        async with await psycopg.AsyncConnection.connect(APP_URL) as conn:
            again = await notifyd.aio.send(conn.cursor(), n)
            self.assertEqual(again, notifyd.SendResult(res.id, True))
            self.assertTrue(await notifyd.aio.subscribe(conn, "py-aio-topic", "py-a2"))
            self.assertTrue(await notifyd.aio.unsubscribe(conn, "py-aio-topic", "py-a2"))
            await notifyd.aio.put_recipient(conn, "py-a3", {"locale": "pt-BR"})
            with self.assertRaises(notifyd.UnknownNotifierError):
                async with conn.transaction():
                    await notifyd.aio.send(conn, notifyd.Notification(notifier="nope", key="k", recipients=["x"]))
            with self.assertRaises(notifyd.InputError) as cm:
                async with conn.transaction():
                    await notifyd.aio.put_recipient(conn, "py-a3", {"phone": "555"})
            self.assertEqual(cm.exception.field, "phone")
            self.assertEqual(await notifyd.aio.cancel(conn, "comment.created", "py-aio"), 1)
        self.assertEqual(scalar("SELECT locale FROM notify_recipients WHERE id = 'py-a3'"), "pt-BR")
        async with await psycopg.AsyncConnection.connect(APP_URL, autocommit=True) as conn:
            with self.assertRaises(notifyd.NotInTransactionError):
                await notifyd.aio.send(conn, n)
        self.assertEqual(scalar("SELECT count(*) FROM notify_inbox WHERE key = 'py-aio'"), 0)


if __name__ == "__main__":
    unittest.main()
