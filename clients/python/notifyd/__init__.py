"""notifyd's Python client: enqueue notifications inside your own PostgreSQL
transaction with psycopg 3.

Each function is one statement calling a SQL function that ``notifyd migrate``
installs (notify_send, notify_cancel, notify_subscribe, notify_unsubscribe), so
it commits or rolls back with the rest of your transaction: a notification
exists if and only if your transaction commits::

    with psycopg.connect(url) as conn:          # one transaction
        conn.execute("INSERT INTO comments ...")
        notifyd.send(conn, notifyd.Notification(
            notifier="comment.created", key=f"comment-{cid}",
            recipients=["u2", notifyd.Recipient("u3", reason="author")],
            params={"post_title": "Hello", "author_name": "Ada"}))

The functions take a psycopg ``Connection`` or ``Cursor`` (or any DB-API
cursor whose ``execute`` takes ``%s`` placeholders, such as Django's
``connection.cursor()``). ``notifyd.aio`` has the same functions for
psycopg's ``AsyncConnection`` and ``AsyncCursor``.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, Union

__all__ = [
    "Notification",
    "Recipient",
    "SendResult",
    "InputError",
    "UnknownNotifierError",
    "send",
    "cancel",
    "subscribe",
    "unsubscribe",
]


@dataclass(frozen=True)
class Recipient:
    """A recipient addressed directly: the application's id (1 to 255 bytes)
    and why they get the notification (empty means "direct")."""

    id: str
    reason: str = ""


@dataclass(frozen=True)
class Notification:
    """One occurrence of a notifier declared in notifyd's config.
    (notifier, key) is one notification forever."""

    notifier: str
    key: str
    recipients: Sequence[Union[str, Recipient]] = ()
    topics: Sequence[str] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    actor: Optional[str] = None
    send_at: Optional[datetime.datetime] = None


@dataclass(frozen=True)
class SendResult:
    """The notification's id (a UUIDv7, the same for every send of the same
    pair) and whether it already existed (then nothing new was enqueued)."""

    id: str
    duplicate: bool


class InputError(ValueError):
    """notifyd refused malformed input (SQLSTATE 22023). Nothing was written,
    but PostgreSQL has aborted the transaction: roll it back, or wrap the call
    in a savepoint (``conn.transaction()``) to go on. ``field`` names the
    offending field ("key", "recipients[2].id"); ``__cause__`` is the
    database error."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


class UnknownNotifierError(InputError):
    """The notifier is not in the catalog notifyd publishes from its config."""

    def __init__(self, message: str):
        super().__init__(message, "notifier")


def _fn(name: str, schema: Optional[str]) -> str:
    if not schema:
        return name
    return '"' + schema.replace('"', '""') + '".' + name


def _send_sql(schema: Optional[str]) -> str:
    return (
        "SELECT id::text, duplicate FROM "
        + _fn("notify_send", schema)
        + "(%s, %s, %s::jsonb, %s::jsonb, %s::text[], %s, %s::timestamptz)"
    )


def _send_args(n: Notification) -> list:
    recipients = [
        r if isinstance(r, str) else ({"id": r.id, "reason": r.reason} if r.reason else {"id": r.id})
        for r in n.recipients
    ]
    return [
        n.notifier,
        n.key,
        json.dumps(recipients),
        json.dumps(dict(n.params)),
        list(n.topics),
        n.actor,
        n.send_at,
    ]


def _map_error(err: BaseException) -> Optional[InputError]:
    """The InputError for a 22023 raised by notifyd's functions, found on err
    or on what it wraps (Django wraps psycopg's errors)."""
    e: Optional[BaseException] = err
    while e is not None:
        if getattr(e, "sqlstate", None) == "22023":
            diag = getattr(e, "diag", None)
            message = getattr(diag, "message_primary", None) or str(e)
            column = getattr(diag, "column_name", None) or ""
            if column == "notifier" and message.startswith("unknown notifier"):
                return UnknownNotifierError(message)
            return InputError(message, column)
        e = e.__cause__
    return None


def _run(db: Any, sql: str, args: list) -> tuple:
    try:
        cur = db.execute(sql, args)
        if cur is None:  # a DB-API cursor's execute returns nothing
            cur = db
        return cur.fetchone()
    except Exception as err:
        mapped = _map_error(err)
        if mapped is None:
            raise
        raise mapped from err


def send(db: Any, n: Notification, *, schema: Optional[str] = None) -> SendResult:
    """Enqueue n in the transaction db is in. Sending the same (notifier, key)
    again returns the first id with duplicate=True and changes nothing.
    Raises InputError (UnknownNotifierError for a notifier notifyd does not
    declare). schema names notifyd's schema when it is not on the
    search_path."""
    row = _run(db, _send_sql(schema), _send_args(n))
    return SendResult(id=row[0], duplicate=row[1])


def cancel(db: Any, notifier: str, key: str, *, schema: Optional[str] = None) -> Optional[int]:
    """Cancel (notifier, key): unsent deliveries become cancelled, inbox items
    are removed. Returns how many were withdrawn (0 when already cancelled),
    or None when the notification was never sent. Call it last in the
    transaction: it serialises with other inbox writers until commit."""
    return _run(db, "SELECT " + _fn("notify_cancel", schema) + "(%s, %s)", [notifier, key])[0]


def subscribe(db: Any, topic: str, recipient: str, reason: str = "subscribed", *,
              schema: Optional[str] = None) -> bool:
    """Subscribe recipient to topic (subscribing again changes the reason).
    Returns True when the subscription is new."""
    return _run(db, "SELECT " + _fn("notify_subscribe", schema) + "(%s, %s, %s)", [topic, recipient, reason])[0]


def unsubscribe(db: Any, topic: str, recipient: str, *, schema: Optional[str] = None) -> bool:
    """Remove recipient's subscription to topic; returns whether there was one."""
    return _run(db, "SELECT " + _fn("notify_unsubscribe", schema) + "(%s, %s)", [topic, recipient])[0]
