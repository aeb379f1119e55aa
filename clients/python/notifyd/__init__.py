"""notifyd's Python client: enqueue notifications inside your own PostgreSQL
transaction.

Each function is one statement calling a SQL function that ``notifyd migrate``
installs (notify_send, notify_cancel, notify_subscribe, notify_unsubscribe,
notify_put_recipient), so it commits or rolls back with the rest of your
transaction: a notification exists if and only if your transaction commits::

    with psycopg.connect(url) as conn:          # one transaction
        conn.execute("INSERT INTO comments ...")
        notifyd.send(conn, notifyd.Notification(
            notifier="comment.created", key=f"comment-{cid}",
            recipients=["u2", notifyd.Recipient("u3", reason="author")],
            params={"post_title": "Hello", "author_name": "Ada"}))

The functions take a psycopg 3 ``Connection`` or ``Cursor``, a psycopg2
connection or cursor, or any DB-API cursor whose ``execute`` takes ``%s``
placeholders. ``notifyd.aio`` has them for psycopg's ``AsyncConnection``;
``notifyd.django`` and ``notifyd.sqlalchemy`` for those frameworks.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import math
import time
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Dict, Generic, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

__version__ = "0.1.0"

__all__ = [
    "Notification",
    "Recipient",
    "SendResult",
    "NotifydError",
    "NotInTransactionError",
    "InputError",
    "UnknownNotifierError",
    "send",
    "cancel",
    "subscribe",
    "unsubscribe",
    "put_recipient",
    "recipient_token",
]


@dataclass(frozen=True)
class Recipient:
    """A recipient addressed directly: the application's id (1 to 255 bytes)
    and why they get the notification (empty means "direct")."""

    id: str
    reason: str = ""


NotifierT = TypeVar("NotifierT", bound=str)
"""The type of a Notification's notifier name: str, or the Literal of the
names `notifyd gen types -lang python` writes (NotifierName)."""


@dataclass(frozen=True)
class Notification(Generic[NotifierT]):
    """One occurrence of a notifier declared in notifyd's config.
    (notifier, key) is one notification forever. Give at least one recipient
    or topic.

    It is generic over the notifier name: ``Notification[NotifierName]``,
    with the NotifierName of ``notifyd gen types -lang python``, makes a type
    checker refuse a name that is not a notifier of the config."""

    notifier: NotifierT
    key: str
    recipients: Sequence[Union[str, Recipient]] = ()
    topics: Sequence[str] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    actor: Optional[str] = None
    send_at: Optional[datetime.datetime] = None
    tenant: Optional[str] = None


@dataclass(frozen=True)
class SendResult:
    """The notification's id (a UUIDv7, the same for every send of the same
    pair) and whether it already existed (then nothing new was enqueued)."""

    id: str
    duplicate: bool


class NotifydError(Exception):
    """The base of notifyd's errors."""


class NotInTransactionError(NotifydError, RuntimeError):
    """send was given a connection outside a transaction (autocommit, or
    Django outside transaction.atomic), where the notification would commit
    on its own whatever happens to the rest of the caller's work."""


class InputError(NotifydError, ValueError):
    """notifyd refused malformed input (SQLSTATE 22023). Nothing was written,
    but PostgreSQL has aborted the transaction: roll it back, or wrap the call
    in a savepoint to go on.

    ``field`` names the offending field ("key", "recipients[2].id", "params",
    "email"); ``sqlstate`` is "22023" ("" when the client refused the input
    before any query); ``detail`` is PostgreSQL's DETAIL (for params, the
    JSON pointer of the value); ``__cause__`` is the driver's error."""

    def __init__(self, message: str, field: str, sqlstate: str = "22023", detail: str = ""):
        super().__init__(message)
        self.message = message
        self.field = field
        self.sqlstate = sqlstate
        self.detail = detail


class UnknownNotifierError(InputError):
    """The notifier is not in the catalog notifyd publishes from its config."""

    def __init__(self, message: str, sqlstate: str = "22023", detail: str = ""):
        super().__init__(message, "notifier", sqlstate, detail)


def _fn(name: str, schema: Optional[str]) -> str:
    if not schema:
        return name
    return '"' + schema.replace('"', '""') + '".' + name


def _send_sql(schema: Optional[str]) -> str:
    return (
        "SELECT id::text, duplicate FROM "
        + _fn("notify_send", schema)
        + "(%s, %s, %s::jsonb, %s::jsonb, %s::text[], %s, %s::timestamptz, %s)"
    )


def _send_args(n: "Notification[Any]") -> List[Any]:
    if not isinstance(n, Notification):
        raise TypeError("notifyd.send: want a notifyd.Notification, got " + type(n).__name__)
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
        n.tenant,
    ]


def _put_args(recipient_id: str, profile: Mapping[str, Any]) -> List[Any]:
    body = {}
    for k, v in profile.items():
        if isinstance(v, datetime.datetime):
            if v.tzinfo is None:
                raise InputError(k + ": want a timezone-aware datetime", k, sqlstate="")
            v = v.isoformat()
        body[k] = v
    return [recipient_id, json.dumps(body)]


# GUARD_SQL asks the server whether the session is inside an explicit
# transaction block: SAVEPOINT is refused with SQLSTATE 25P01 outside one
# (also in the implicit block of a multi-statement query, which commits on its
# own) and is released at once inside one, leaving nothing behind. One
# round trip, without parameters. Not now() <> statement_timestamp(): that is
# false for the first statement after a BEGIN sent in the same round trip. Not
# txid_current_if_assigned(): that is null in a transaction that has not
# written yet.
GUARD_SQL = "SAVEPOINT notifyd_in_transaction; RELEASE SAVEPOINT notifyd_in_transaction"


def _driver_connection(db: Any) -> Any:
    """The DB-API connection under db: db itself, a cursor's connection,
    SQLAlchemy's pooled connection's dbapi_connection (whose own ``info`` is
    a dict of SQLAlchemy's), Django's cursor wrapper's driver connection."""
    for _ in range(4):
        inner = getattr(db, "dbapi_connection", None)  # SQLAlchemy's pool proxy
        if inner is not None and inner is not db:
            db = inner
            continue
        if hasattr(db, "autocommit"):
            return db
        inner = getattr(db, "connection", None)  # a cursor
        if inner is None or callable(inner) or inner is db:
            return db
        db = inner
    return db


def _driver_in_transaction(db: Any) -> Optional[bool]:
    """Whether db's psycopg 3 or psycopg2 connection is in a transaction, as
    the driver tells it, or None when it cannot tell. Outside autocommit the
    driver begins one before the statement, so it is in one."""
    conn = _driver_connection(db)
    autocommit = getattr(conn, "autocommit", None)
    if autocommit is False:
        return True
    if autocommit is not True:
        return None
    info = getattr(conn, "info", None)
    status = getattr(info, "transaction_status", None) if not isinstance(info, dict) else None
    if status is None and callable(getattr(conn, "get_transaction_status", None)):
        status = conn.get_transaction_status()  # psycopg2 before 2.8
    try:
        status = int(status) if status is not None else None
    except (TypeError, ValueError):
        return None
    # libpq's PGTransactionStatusType, the same in psycopg 3 and psycopg2:
    # 0 IDLE, 1 ACTIVE (a command in progress), 2 INTRANS, 3 INERROR, 4 UNKNOWN.
    if status == 0:
        return False
    if status in (2, 3):
        return True
    return None


def _has_sqlstate(err: BaseException, code: str) -> bool:
    seen = set()
    todo: List[BaseException] = [err]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if _sqlstate(e) == code:
            return True
        for nxt in (e.__cause__, e.__context__, getattr(e, "orig", None)):
            if isinstance(nxt, BaseException):
                todo.append(nxt)
    return False


def _server_in_transaction(db: Any) -> bool:
    """Asks the server (GUARD_SQL) whether db is in a transaction block."""
    try:
        if not hasattr(db, "execute") and hasattr(db, "cursor"):
            cur = db.cursor()
            try:
                cur.execute(GUARD_SQL)
            finally:
                cur.close()
        else:
            db.execute(GUARD_SQL)
    except Exception as err:
        if _has_sqlstate(err, "25P01"):
            return False
        raise
    return True


def _check_transaction(db: Any, allow_autocommit: bool) -> None:
    if allow_autocommit:
        return
    inside = _driver_in_transaction(db)
    if inside is None:
        inside = _server_in_transaction(db)
    if not inside:
        raise NotInTransactionError(
            "notifyd.send: the connection is not in a transaction (autocommit), so the notification would "
            "commit on its own: use `with conn.transaction():` (or pass allow_autocommit=True to send on its own)")


def _sqlstate(e: BaseException) -> Optional[str]:
    # psycopg 3: sqlstate; psycopg2: pgcode.
    return getattr(e, "sqlstate", None) or getattr(e, "pgcode", None)


def _map_error(err: BaseException) -> Optional[InputError]:
    """The InputError for a 22023 raised by notifyd's functions, found on err
    or on what it wraps (Django and SQLAlchemy wrap the driver's errors)."""
    seen = set()
    todo: List[BaseException] = [err]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if _sqlstate(e) == "22023":
            diag = getattr(e, "diag", None)
            message = getattr(diag, "message_primary", None) or str(e).split("\n")[0]
            column = getattr(diag, "column_name", None) or ""
            detail = getattr(diag, "message_detail", None) or ""
            if column == "notifier" and message.startswith("unknown notifier"):
                return UnknownNotifierError(message, detail=detail)
            return InputError(message, column, detail=detail)
        for nxt in (e.__cause__, getattr(e, "orig", None)):
            if isinstance(nxt, BaseException):
                todo.append(nxt)
    return None


def _cursor_run(cur: Any, sql: str, args: List[Any]) -> Tuple[Any, ...]:
    res = cur.execute(sql, args)
    if res is None:  # a DB-API cursor's execute returns nothing
        res = cur
    row: Tuple[Any, ...] = res.fetchone()
    return row


def _run(db: Any, sql: str, args: List[Any]) -> Tuple[Any, ...]:
    try:
        if not hasattr(db, "execute") and hasattr(db, "cursor"):
            # A DB-API connection (psycopg2): one cursor for the call.
            cur = db.cursor()
            try:
                return _cursor_run(cur, sql, args)
            finally:
                cur.close()
        if not hasattr(db, "execute"):
            raise TypeError(
                "notifyd: want a psycopg or psycopg2 connection or cursor (for Django and SQLAlchemy, "
                "use notifyd.django and notifyd.sqlalchemy), got " + type(db).__name__
            )
        return _cursor_run(db, sql, args)
    except Exception as err:
        mapped = _map_error(err)
        if mapped is None:
            raise
        raise mapped from err


def send(db: Any, n: "Notification[Any]", *, schema: Optional[str] = None, allow_autocommit: bool = False) -> SendResult:
    """Enqueue n in the transaction db is in. Sending the same (notifier, key)
    again returns the first id with duplicate=True and changes nothing.
    Raises InputError (UnknownNotifierError for a notifier notifyd does not
    declare), and NotInTransactionError for a connection in autocommit
    outside a transaction unless allow_autocommit. schema names notifyd's
    schema when it is not on the search_path."""
    _check_transaction(db, allow_autocommit)
    row = _run(db, _send_sql(schema), _send_args(n))
    return SendResult(id=row[0], duplicate=row[1])


def cancel(db: Any, notifier: str, key: str, *, schema: Optional[str] = None) -> Optional[int]:
    """Cancel (notifier, key): unsent deliveries become cancelled, inbox items
    are removed. Returns how many were withdrawn (0 when already cancelled),
    or None when the notification was never sent. Call it last in the
    transaction: it serialises with other inbox writers until commit."""
    n: Optional[int] = _run(db, "SELECT " + _fn("notify_cancel", schema) + "(%s, %s)", [notifier, key])[0]
    return n


def subscribe(db: Any, topic: str, recipient: str, reason: str = "subscribed", *,
              schema: Optional[str] = None) -> bool:
    """Subscribe recipient to topic (subscribing again changes the reason).
    Returns True when the subscription is new."""
    return bool(_run(db, "SELECT " + _fn("notify_subscribe", schema) + "(%s, %s, %s)", [topic, recipient, reason])[0])


def unsubscribe(db: Any, topic: str, recipient: str, *, schema: Optional[str] = None) -> bool:
    """Remove recipient's subscription to topic; returns whether there was one."""
    return bool(_run(db, "SELECT " + _fn("notify_unsubscribe", schema) + "(%s, %s)", [topic, recipient])[0])


def put_recipient(db: Any, recipient_id: str, profile: Mapping[str, Any], *, schema: Optional[str] = None) -> None:
    """Create or change the recipient's profile in db's transaction: keys
    absent from profile are kept, None clears. Fields: email, name, locale,
    timezone, webhook_url, phone, data, quiet_hours ({"start": "22:00",
    "end": "07:00"}), tokens_valid_after (an aware datetime). An invalid
    field raises InputError naming it."""
    _run(db, "SELECT 1 FROM " + _fn("notify_put_recipient", schema) + "(%s, %s::jsonb)",
         _put_args(recipient_id, profile))


def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode("ascii")


def _check_tenant(tenant: Any) -> None:
    # The daemon's rule for a tenant id: 1 to 255 bytes of text without
    # control characters. An empty string is refused rather than read as "no
    # claim": a token meant for one tenant must never reach them all.
    if (not isinstance(tenant, str) or not tenant or len(tenant.encode("utf-8", "surrogatepass")) > 255
            or any(unicodedata.category(c) in ("Cc", "Cs") for c in tenant)):
        raise InputError("tenant: want a tenant id of 1 to 255 bytes without control characters", "tenant", sqlstate="")


def recipient_token(secret: str, recipient: str, ttl: Union[int, float, datetime.timedelta], *,
                    now: Optional[datetime.datetime] = None, tenant: Optional[str] = None) -> str:
    """Mint the token a recipient's browser presents to GET /v1/inbox (and
    the stream and preferences): an HS256 JWT signed with notifyd's
    http.token_secret, subject the recipient id, iat now and exp now + ttl
    (seconds or a timedelta), which must not exceed notifyd's
    http.max_token_ttl (24 hours by default). With tenant, the token carries
    the tenant claim and reads, marks and streams only that tenant's inbox
    items and preferences; without it, it has no claim."""
    if not isinstance(secret, str) or not secret:
        raise InputError("secret: is required (notifyd's http.token_secret)", "secret", sqlstate="")
    if not isinstance(recipient, str) or not recipient or len(recipient.encode()) > 255:
        raise InputError("recipient: want a recipient id of 1 to 255 bytes", "recipient", sqlstate="")
    seconds = ttl.total_seconds() if isinstance(ttl, datetime.timedelta) else ttl
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0:
        raise InputError("ttl: want a positive number of seconds", "ttl", sqlstate="")
    if tenant is not None:
        _check_tenant(tenant)
    iat = int(now.timestamp()) if now is not None else int(time.time())
    claims: Dict[str, Any] = {"sub": recipient, "iat": iat, "exp": iat + math.ceil(seconds)}
    if tenant is not None:
        claims["tenant"] = tenant
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    body = _b64(json.dumps(claims, separators=(",", ":"), ensure_ascii=False).encode())
    mac = hmac.new(secret.encode(), (header + "." + body).encode(), hashlib.sha256).digest()
    return header + "." + body + "." + _b64(mac)
