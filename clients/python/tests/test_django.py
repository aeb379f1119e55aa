"""notifyd.django with Debian's Django (psycopg2 backend), as the
application's role: the send commits and rolls back with the ORM's writes
in transaction.atomic."""

import unittest

import django
from django.conf import settings

from tests.env import APP_URL, PARAMS, dsn_parts, scalar, wait_for

if not settings.configured:
    settings.configure(
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", **dsn_parts(APP_URL)}},
        INSTALLED_APPS=[],
        USE_TZ=True,
    )
    django.setup()

from django.db import connection, transaction  # noqa: E402

import notifyd  # noqa: E402
import notifyd.django  # noqa: E402


class Rollback(Exception):
    pass


def comment(key: str) -> notifyd.Notification:
    return notifyd.Notification(notifier="comment.created", key=key, recipients=["dj-u1"], params=PARAMS)


class DjangoTest(unittest.TestCase):
    @classmethod
    def tearDownClass(cls) -> None:
        connection.close()

    def test_atomic_rollback_and_commit(self) -> None:
        with self.assertRaises(Rollback):
            with transaction.atomic():
                with connection.cursor() as cur:
                    cur.execute("INSERT INTO comments (id, body) VALUES (2301, 'rolled back')")
                notifyd.django.send(comment("dj-send"))
                raise Rollback()
        self.assertEqual(scalar("SELECT count(*) FROM comments WHERE id = 2301"), 0)
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'dj-send'"), 0)

        with transaction.atomic():
            with connection.cursor() as cur:
                cur.execute("INSERT INTO comments (id, body) VALUES (2302, 'committed')")
            res = notifyd.django.send(comment("dj-send"))
        self.assertFalse(res.duplicate)
        self.assertEqual(scalar("SELECT count(*) FROM comments WHERE id = 2302"), 1)
        wait_for("SELECT 1 FROM notify_inbox WHERE recipient = 'dj-u1' AND key = 'dj-send'")
        with transaction.atomic():
            self.assertEqual(notifyd.django.send(comment("dj-send")), notifyd.SendResult(res.id, True))
            self.assertTrue(notifyd.django.subscribe("dj-topic", "dj-u2"))
            self.assertTrue(notifyd.django.unsubscribe("dj-topic", "dj-u2"))
            notifyd.django.put_recipient("dj-p1", {"name": "Ada"})
            self.assertEqual(notifyd.django.cancel("comment.created", "dj-send"), 1)
        self.assertEqual(scalar("SELECT name FROM notify_recipients WHERE id = 'dj-p1'"), "Ada")

    def test_send_outside_atomic_is_refused(self) -> None:
        with self.assertRaises(notifyd.NotInTransactionError) as cm:
            notifyd.django.send(comment("dj-autocommit"))
        self.assertIn("transaction.atomic", str(cm.exception))
        # notifyd.send on a Django cursor outside atomic: the driver's
        # connection is in autocommit, so it is refused too.
        with connection.cursor() as cur:
            with self.assertRaises(notifyd.NotInTransactionError):
                notifyd.send(cur, comment("dj-autocommit"))
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'dj-autocommit'"), 0)

    def test_errors_through_django_wrappers(self) -> None:
        with self.assertRaises(notifyd.UnknownNotifierError):
            with transaction.atomic():
                notifyd.django.send(notifyd.Notification(notifier="no.such", key="dj-bad", recipients=["x"]))
        with self.assertRaises(notifyd.InputError) as cm:
            with transaction.atomic():
                notifyd.django.put_recipient("dj-p2", {"webhook_url": "ftp://example.com/"})
        self.assertEqual(cm.exception.field, "webhook_url")
        self.assertEqual(scalar("SELECT count(*) FROM notify_recipients WHERE id = 'dj-p2'"), 0)


if __name__ == "__main__":
    unittest.main()
