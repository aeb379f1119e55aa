"""notifyd for SQLAlchemy (1.4 and 2.0): the calls on a ``Session`` or a
``Connection`` (``session.connection()``, ``engine.begin()``), in the
transaction it is in::

    with Session(engine) as session, session.begin():
        session.add(Comment(post_id=9, body=body))
        session.flush()
        notifyd.sqlalchemy.send(session, notifyd.Notification(...))

The statement runs on the connection's DB-API connection (psycopg2 or
psycopg 3), so it is part of the session's transaction. Errors are
notifyd's InputError and UnknownNotifierError.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import notifyd
from notifyd import NotInTransactionError, Notification, SendResult

__all__ = ["send", "cancel", "subscribe", "unsubscribe", "put_recipient"]


def _dbapi(bind: Any) -> Any:
    # A Session: its connection, which begins its transaction if needed.
    if hasattr(bind, "connection") and callable(bind.connection) and hasattr(bind, "flush"):
        bind = bind.connection()
    if not hasattr(bind, "exec_driver_sql"):
        raise TypeError("notifyd.sqlalchemy: want a Session or a Connection, got " + type(bind).__name__
                        + " (an Engine has no transaction: use engine.begin())")
    if not bind.in_transaction():
        raise NotInTransactionError("notifyd.sqlalchemy: the connection is not in a transaction, so the call would not "
                           "commit with your writes: use engine.begin(), connection.begin() or a Session")
    # 2.0: driver_connection is the psycopg connection; 1.4: connection is a
    # proxy of the DB-API connection, with cursor().
    return bind.connection


def send(bind: Any, n: "Notification[Any]", *, schema: Optional[str] = None) -> SendResult:
    """notifyd.send in the transaction of bind (a Session or Connection)."""
    return notifyd.send(_dbapi(bind), n, schema=schema)


def cancel(bind: Any, notifier: str, key: str, *, schema: Optional[str] = None) -> Optional[int]:
    """notifyd.cancel in bind's transaction."""
    return notifyd.cancel(_dbapi(bind), notifier, key, schema=schema)


def subscribe(bind: Any, topic: str, recipient: str, reason: str = "subscribed", *,
              schema: Optional[str] = None) -> bool:
    """notifyd.subscribe in bind's transaction."""
    return notifyd.subscribe(_dbapi(bind), topic, recipient, reason, schema=schema)


def unsubscribe(bind: Any, topic: str, recipient: str, *, schema: Optional[str] = None) -> bool:
    """notifyd.unsubscribe in bind's transaction."""
    return notifyd.unsubscribe(_dbapi(bind), topic, recipient, schema=schema)


def put_recipient(bind: Any, recipient_id: str, profile: Mapping[str, Any], *, schema: Optional[str] = None) -> None:
    """notifyd.put_recipient in bind's transaction."""
    notifyd.put_recipient(_dbapi(bind), recipient_id, profile, schema=schema)
