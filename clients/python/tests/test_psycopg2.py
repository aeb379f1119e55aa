"""The client on psycopg2 connections and cursors (Django 3/4's and
SQLAlchemy 1.4's default driver), as the application's role: errors come
from pgcode and diag."""

import unittest

import psycopg2
import psycopg2.errors

import notifyd
from tests.env import APP_URL, PARAMS, scalar, wait_for


class Psycopg2Test(unittest.TestCase):
    def test_rollback_commit_duplicate_cancel(self) -> None:
        n = notifyd.Notification(notifier="comment.created", key="py2-send", recipients=["py2-u1"], params=PARAMS)
        conn = psycopg2.connect(APP_URL)
        try:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO comments (id, body) VALUES (2201, 'rolled back')")
            first = notifyd.send(conn, n)  # the connection: a cursor per call
            conn.rollback()
            self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE id = %s", first.id), 0)
            self.assertEqual(scalar("SELECT count(*) FROM comments WHERE id = 2201"), 0)

            with conn:  # psycopg2: commits on success
                with conn.cursor() as cur:
                    cur.execute("INSERT INTO comments (id, body) VALUES (2202, 'committed')")
                    res = notifyd.send(cur, n)  # or a cursor
            self.assertFalse(res.duplicate)
            self.assertEqual(scalar("SELECT count(*) FROM comments WHERE id = 2202"), 1)
            wait_for("SELECT 1 FROM notify_inbox WHERE recipient = 'py2-u1' AND key = 'py2-send'")
            with conn:
                self.assertEqual(notifyd.send(conn, n), notifyd.SendResult(res.id, True))
                self.assertTrue(notifyd.subscribe(conn, "py2-topic", "py2-u2"))
                self.assertTrue(notifyd.unsubscribe(conn, "py2-topic", "py2-u2"))
                notifyd.put_recipient(conn, "py2-p1", {"email": "ada@example.com"})
                self.assertEqual(notifyd.cancel(conn, "comment.created", "py2-send"), 1)
            self.assertEqual(scalar("SELECT email FROM notify_recipients WHERE id = 'py2-p1'"), "ada@example.com")
        finally:
            conn.close()

    def test_autocommit_is_refused_and_commits_nothing(self) -> None:
        conn = psycopg2.connect(APP_URL)
        conn.autocommit = True
        try:
            for db in (conn, conn.cursor()):
                with self.assertRaises(notifyd.NotInTransactionError):
                    notifyd.send(db, notifyd.Notification(notifier="comment.created", key="py2-autocommit",
                                                          recipients=["py2-u1"], params=PARAMS))
            self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'py2-autocommit'"), 0)
            with conn.cursor() as cur:  # an explicit BEGIN is a transaction
                cur.execute("BEGIN")
                notifyd.send(cur, notifyd.Notification(notifier="comment.created", key="py2-autocommit",
                                                       recipients=["py2-u1"], params=PARAMS))
                cur.execute("ROLLBACK")
        finally:
            conn.close()
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'py2-autocommit'"), 0)

    def test_errors(self) -> None:
        conn = psycopg2.connect(APP_URL)
        try:
            with self.assertRaises(notifyd.UnknownNotifierError) as cm:
                notifyd.send(conn, notifyd.Notification(notifier="no.such", key="py2-bad", recipients=["x"]))
            conn.rollback()
            self.assertEqual(cm.exception.field, "notifier")
            self.assertIsInstance(cm.exception.__cause__, psycopg2.errors.InvalidParameterValue)
            with self.assertRaises(notifyd.InputError) as cm2:
                notifyd.send(conn, notifyd.Notification(notifier="comment.created", key="py2-bad", recipients=["x"],
                                                        params={"post_title": 1, "author_name": "Ada"}))
            conn.rollback()
            self.assertEqual((cm2.exception.field, cm2.exception.detail), ("params", "/post_title"))
            self.assertEqual(str(cm2.exception), "comment.created: params /post_title: got number, want string")
            with self.assertRaises(notifyd.InputError) as cm3:
                notifyd.put_recipient(conn, "py2-p2", {"email": "nope"})
            conn.rollback()
            self.assertEqual(cm3.exception.field, "email")
        finally:
            conn.close()
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'py2-bad'"), 0)


if __name__ == "__main__":
    unittest.main()
