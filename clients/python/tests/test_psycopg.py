"""The client on psycopg 3 (sync), connected as a role that holds only
notifyd_app, against a real notifyd."""

import datetime
import unittest

import psycopg
import psycopg2

import notifyd
from tests.env import APP_URL, PARAMS, TOKEN_SECRET, inbox, scalar, wait_for


def comment(key: str, **kw: object) -> notifyd.Notification:
    return notifyd.Notification(notifier="comment.created", key=key, params=kw.pop("params", PARAMS), **kw)  # type: ignore[arg-type]


class Psycopg3Test(unittest.TestCase):
    def test_rollback_takes_back_the_row_and_the_send(self) -> None:
        with psycopg.connect(APP_URL) as conn:
            conn.execute("INSERT INTO comments (id, body) VALUES (2001, 'rolled back')")
            res = notifyd.send(conn, comment("py-rollback", recipients=["py-u1"]))
            self.assertFalse(res.duplicate)
            conn.rollback()
        self.assertEqual(scalar("SELECT count(*) FROM comments WHERE id = 2001"), 0)
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE id = %s", res.id), 0)
        self.assertEqual(scalar("SELECT count(*) FROM river_job WHERE args->>'notification_id' = %s", res.id), 0)

    def test_commit_sends_with_the_row_and_the_token_reads_the_inbox(self) -> None:
        with psycopg.connect(APP_URL) as conn:  # commits on leaving the block
            conn.execute("INSERT INTO comments (id, body) VALUES (2002, 'committed')")
            res = notifyd.send(conn, comment("py-commit", recipients=[notifyd.Recipient("py-u2", reason="author"), "py-u3"],
                                             actor="py-u9"))
        self.assertRegex(res.id, r"^[0-9a-f]{8}-[0-9a-f]{4}-7")
        self.assertEqual(scalar("SELECT count(*) FROM comments WHERE id = 2002"), 1)
        title, reason = wait_for("SELECT title, reason FROM notify_inbox WHERE recipient = %s AND key = %s",
                                 "py-u2", "py-commit")
        self.assertEqual((title, reason), ("Ada commented on Hello", "author"))

        status, body = inbox(notifyd.recipient_token(TOKEN_SECRET, "py-u2", 600))
        self.assertEqual(status, 200)
        assert body is not None
        self.assertEqual([(i["key"], i["title"]) for i in body["items"]], [("py-commit", "Ada commented on Hello")])
        # Another secret, or an expired token, is refused.
        self.assertEqual(inbox(notifyd.recipient_token(TOKEN_SECRET + "x", "py-u2", 600))[0], 401)
        past = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
        self.assertEqual(inbox(notifyd.recipient_token(TOKEN_SECRET, "py-u2", datetime.timedelta(minutes=1), now=past))[0], 401)

    def test_duplicate_returns_the_first_id(self) -> None:
        with psycopg.connect(APP_URL) as conn:
            first = notifyd.send(conn, comment("py-dup", recipients=["py-u4"]))
        with psycopg.connect(APP_URL) as conn:
            again = notifyd.send(conn.cursor(), comment("py-dup", recipients=["py-u5"]))
        self.assertEqual(again, notifyd.SendResult(id=first.id, duplicate=True))
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'py-dup'"), 1)

    def test_tenant(self) -> None:
        with psycopg.connect(APP_URL) as conn:
            notifyd.send(conn, comment("py-tenant", recipients=["py-u1"], tenant="acme"))
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'py-tenant' AND tenant = 'acme'"), 1)
        with psycopg.connect(APP_URL) as conn:
            with self.assertRaises(notifyd.InputError) as cm:
                notifyd.send(conn, comment("py-tenant-2", recipients=["py-u1"], tenant="nope"))
        self.assertNotIsInstance(cm.exception, notifyd.UnknownNotifierError)
        self.assertEqual((cm.exception.field, cm.exception.sqlstate), ("tenant", "22023"))
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'py-tenant-2'"), 0)

    def test_errors(self) -> None:
        with psycopg.connect(APP_URL) as conn:
            with self.assertRaises(notifyd.UnknownNotifierError) as cm:
                with conn.transaction():  # a savepoint: the connection goes on
                    notifyd.send(conn, notifyd.Notification(notifier="no.such", key="py-unknown", recipients=["py-u1"]))
            self.assertEqual(cm.exception.field, "notifier")
            self.assertEqual(cm.exception.sqlstate, "22023")
            self.assertIn('unknown notifier "no.such"', str(cm.exception))
            self.assertIsInstance(cm.exception.__cause__, psycopg.errors.InvalidParameterValue)
            cases = [
                (lambda: notifyd.send(conn, comment("py-bad", recipients=["py-u1", notifyd.Recipient("")])),
                 "recipients[1].id", "recipients[1].id: is required", ""),
                (lambda: notifyd.send(conn, comment("py-bad", recipients=["py-u1"], params={"post_title": "x"})),
                 "params", "comment.created: params /author_name: missing required property", "/author_name"),
                (lambda: notifyd.send(conn, comment("py-bad")), "recipients",
                 "recipients: give at least one recipient or topic", ""),
                (lambda: notifyd.subscribe(conn, "py-topic", "py-u1", "two words"), "reason", None, ""),
                (lambda: notifyd.put_recipient(conn, "py-p1", {"timezone": "europe/paris"}), "timezone", None, ""),
                (lambda: notifyd.put_recipient(conn, "py-p1", {"nickname": "x"}), "nickname",
                 "nickname: unknown field", ""),
            ]
            for call, field, message, detail in cases:
                with self.subTest(field=field):
                    with self.assertRaises(notifyd.InputError) as cm2:
                        with conn.transaction():
                            call()
                    e = cm2.exception
                    self.assertNotIsInstance(e, notifyd.UnknownNotifierError)
                    self.assertEqual(e.field, field)
                    self.assertEqual(e.sqlstate, "22023")
                    self.assertEqual(e.detail, detail)
                    self.assertTrue(str(e).startswith(field + ": ") or field == "params", str(e))
                    if message is not None:
                        self.assertEqual(str(e), message)
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key IN ('py-bad', 'py-unknown')"), 0)
        self.assertEqual(scalar("SELECT count(*) FROM notify_recipients WHERE id = 'py-p1'"), 0)

    def test_put_recipient(self) -> None:
        with psycopg.connect(APP_URL) as conn:
            notifyd.put_recipient(conn, "py-p2", {"email": "ada@example.com", "timezone": "Europe/Paris",
                                                  "data": {"plan": "pro"}})
            conn.rollback()
        self.assertEqual(scalar("SELECT count(*) FROM notify_recipients WHERE id = 'py-p2'"), 0)
        with psycopg.connect(APP_URL) as conn:
            notifyd.put_recipient(conn, "py-p2", {"email": "ada@example.com", "timezone": "Europe/Paris",
                                                  "data": {"plan": "pro"}})
            notifyd.put_recipient(conn, "py-p2", {"name": "Ada", "timezone": None})
        row = scalar("SELECT row(email, name, timezone, data)::text FROM notify_recipients WHERE id = 'py-p2'")
        self.assertEqual(row, '(ada@example.com,Ada,,"{""plan"": ""pro""}")')

    def test_autocommit_is_refused_unless_asked_for(self) -> None:
        with psycopg.connect(APP_URL, autocommit=True) as conn:
            for db in (conn, conn.cursor()):
                with self.assertRaises(notifyd.NotInTransactionError) as cm:
                    notifyd.send(db, comment("py-autocommit", recipients=["py-u1"]))
                self.assertIn("conn.transaction()", str(cm.exception))
            self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'py-autocommit'"), 0)
            with conn.transaction():  # inside one, autocommit or not, it is part of it
                notifyd.send(conn, comment("py-autocommit", recipients=["py-u1"]))
            self.assertTrue(notifyd.send(conn, comment("py-autocommit", recipients=["py-u1"]), allow_autocommit=True).duplicate)
        with psycopg2.connect(APP_URL) as conn2:
            conn2.autocommit = True
            with self.assertRaises(notifyd.NotInTransactionError):
                notifyd.send(conn2, comment("py-autocommit-2", recipients=["py-u1"]))
        conn2.close()
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key LIKE 'py-autocommit%%'"), 1)

    def test_subscribe_unsubscribe_cancel(self) -> None:
        with psycopg.connect(APP_URL, autocommit=True) as conn:
            self.assertTrue(notifyd.subscribe(conn, "py-topic", "py-u6"))
            self.assertFalse(notifyd.subscribe(conn, "py-topic", "py-u6", "watching"))
            notifyd.send(conn, comment("py-topic-1", topics=["py-topic"]), allow_autocommit=True)
            (reason,) = wait_for("SELECT reason FROM notify_inbox WHERE recipient = %s AND key = %s", "py-u6", "py-topic-1")
            self.assertEqual(reason, "watching")
            self.assertTrue(notifyd.unsubscribe(conn, "py-topic", "py-u6"))
            self.assertFalse(notifyd.unsubscribe(conn, "py-topic", "py-u6"))
            self.assertIsNone(notifyd.cancel(conn, "comment.created", "py-never-sent"))
            self.assertEqual(notifyd.cancel(conn, "comment.created", "py-topic-1"), 1)
            self.assertEqual(notifyd.cancel(conn, "comment.created", "py-topic-1"), 0)
        self.assertEqual(scalar("SELECT count(*) FROM notify_inbox WHERE key = 'py-topic-1'"), 0)

    def test_a_tenant_token_reads_only_its_tenant(self) -> None:
        scalar("INSERT INTO notify_tenants (id, name) VALUES ('globex', 'Globex') ON CONFLICT (id) DO NOTHING RETURNING 1")
        with psycopg.connect(APP_URL) as conn:
            notifyd.send(conn, comment("py-tt-acme", recipients=["py-tt"], tenant="acme"))
            notifyd.send(conn, comment("py-tt-globex", recipients=["py-tt"], tenant="globex"))
        for key in ("py-tt-acme", "py-tt-globex"):
            wait_for("SELECT 1 FROM notify_inbox WHERE recipient = 'py-tt' AND key = %s", key)
        token = notifyd.recipient_token(TOKEN_SECRET, "py-tt", 600, tenant="acme")
        status, body = inbox(token)
        self.assertEqual(status, 200)
        assert body is not None
        self.assertEqual([i["key"] for i in body["items"]], ["py-tt-acme"])
        self.assertEqual(inbox(token, "tenant=globex")[0], 403)
        # Without the claim the token reads every tenant's items.
        status, body = inbox(notifyd.recipient_token(TOKEN_SECRET, "py-tt", 600))
        assert body is not None
        self.assertEqual(sorted(i["key"] for i in body["items"]), ["py-tt-acme", "py-tt-globex"])

    def test_a_connection_the_driver_cannot_read_is_asked_of_the_server(self) -> None:
        class Opaque:
            """A DB-API cursor that tells nothing about its transaction."""

            def __init__(self, cur: psycopg.Cursor) -> None:  # type: ignore[type-arg]
                self._cur = cur

            def execute(self, sql: str, args: object = None) -> None:
                self._cur.execute(sql, args)  # type: ignore[arg-type]

            def fetchone(self) -> object:
                return self._cur.fetchone()

        with psycopg.connect(APP_URL, autocommit=True) as conn:
            with self.assertRaises(notifyd.NotInTransactionError):
                notifyd.send(Opaque(conn.cursor()), comment("py-opaque", recipients=["py-u1"]))
            self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'py-opaque'"), 0)
            with conn.transaction():
                notifyd.send(Opaque(conn.cursor()), comment("py-opaque", recipients=["py-u1"]))
                conn.execute("SAVEPOINT s")  # the check left no savepoint of its own behind
                conn.execute("RELEASE SAVEPOINT s")
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'py-opaque'"), 1)

    def test_recipient_token_refuses_what_notifyd_would(self) -> None:
        for args, field in [(("", "u1", 60), "secret"), (("s", "", 60), "recipient"), (("s", "x" * 256, 60), "recipient"),
                            (("s", "u1", 0), "ttl"), (("s", "u1", datetime.timedelta(0)), "ttl")]:
            with self.assertRaises(notifyd.InputError) as cm:
                notifyd.recipient_token(*args)  # type: ignore[arg-type]
            self.assertEqual((cm.exception.field, cm.exception.sqlstate), (field, ""))
        for tenant in ("", "a\nb", "x" * 256, 7):
            with self.assertRaises(notifyd.InputError) as cm:
                notifyd.recipient_token("s", "u1", 60, tenant=tenant)  # type: ignore[arg-type]
            self.assertEqual(cm.exception.field, "tenant")


if __name__ == "__main__":
    unittest.main()
