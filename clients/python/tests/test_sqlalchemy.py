"""notifyd.sqlalchemy with Debian's SQLAlchemy (psycopg2), as the
application's role: a Session and a Connection (session.connection(),
engine.begin())."""

import unittest

import sqlalchemy
from sqlalchemy import text
from sqlalchemy.orm import Session

import notifyd
import notifyd.sqlalchemy
from tests.env import APP_URL, PARAMS, scalar, wait_for


def comment(key: str) -> notifyd.Notification:
    return notifyd.Notification(notifier="comment.created", key=key, recipients=["sa-u1"], params=PARAMS)


class SQLAlchemyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        url = APP_URL.replace("postgres://", "postgresql+psycopg2://", 1)
        cls.engine = sqlalchemy.create_engine(url, future=True)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.engine.dispose()

    def test_session_rollback_and_commit(self) -> None:
        with Session(self.engine) as session:
            session.execute(text("INSERT INTO comments (id, body) VALUES (2401, 'rolled back')"))
            notifyd.sqlalchemy.send(session, comment("sa-send"))
            session.rollback()
        self.assertEqual(scalar("SELECT count(*) FROM comments WHERE id = 2401"), 0)
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'sa-send'"), 0)

        with Session(self.engine) as session, session.begin():
            session.execute(text("INSERT INTO comments (id, body) VALUES (2402, 'committed')"))
            res = notifyd.sqlalchemy.send(session.connection(), comment("sa-send"))
        self.assertFalse(res.duplicate)
        self.assertEqual(scalar("SELECT count(*) FROM comments WHERE id = 2402"), 1)
        wait_for("SELECT 1 FROM notify_inbox WHERE recipient = 'sa-u1' AND key = 'sa-send'")

        with self.engine.begin() as conn:
            self.assertEqual(notifyd.sqlalchemy.send(conn, comment("sa-send")), notifyd.SendResult(res.id, True))
            self.assertTrue(notifyd.sqlalchemy.subscribe(conn, "sa-topic", "sa-u2"))
            self.assertTrue(notifyd.sqlalchemy.unsubscribe(conn, "sa-topic", "sa-u2"))
            notifyd.sqlalchemy.put_recipient(conn, "sa-p1", {"quiet_hours": {"start": "22:00", "end": "07:00"}})
            self.assertEqual(notifyd.sqlalchemy.cancel(conn, "comment.created", "sa-send"), 1)
        self.assertEqual(scalar("SELECT count(*) FROM notify_recipients WHERE id = 'sa-p1'"), 1)

    def test_autocommit_engine_begin_is_refused_and_commits_nothing(self) -> None:
        # isolation_level="AUTOCOMMIT": engine.begin() sends no BEGIN, so the
        # block is no transaction and a send in it would commit on its own
        # even when the block then raises.
        url = APP_URL.replace("postgres://", "postgresql+psycopg2://", 1)
        engine = sqlalchemy.create_engine(url, future=True, isolation_level="AUTOCOMMIT")
        try:
            with self.assertRaises(notifyd.NotInTransactionError):
                with engine.begin() as conn:
                    notifyd.sqlalchemy.send(conn, comment("sa-autocommit"))
                    raise RuntimeError("the block fails after the send")
            with self.assertRaises(notifyd.NotInTransactionError):
                with Session(engine) as session, session.begin():
                    notifyd.sqlalchemy.send(session, comment("sa-autocommit"))
        finally:
            engine.dispose()
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key = 'sa-autocommit'"), 0)

    def test_errors(self) -> None:
        with Session(self.engine) as session:
            with self.assertRaises(notifyd.UnknownNotifierError):
                notifyd.sqlalchemy.send(session, notifyd.Notification(notifier="no.such", key="sa-bad", recipients=["x"]))
            session.rollback()
            with self.assertRaises(notifyd.InputError) as cm:
                notifyd.sqlalchemy.send(session, notifyd.Notification(notifier="comment.created", key="", recipients=["x"],
                                                                      params=PARAMS))
            session.rollback()
            self.assertEqual(cm.exception.field, "key")
        with self.assertRaises(TypeError):
            notifyd.sqlalchemy.send(self.engine, comment("sa-engine"))
        self.assertEqual(scalar("SELECT count(*) FROM notify_notifications WHERE key IN ('sa-bad', 'sa-engine')"), 0)


if __name__ == "__main__":
    unittest.main()
