"""notifyd's functions for psycopg 3's AsyncConnection and AsyncCursor: the
same calls as the ``notifyd`` module, awaited::

    async with await psycopg.AsyncConnection.connect(url) as conn:
        await conn.execute("INSERT INTO comments ...")
        await notifyd.aio.send(conn, notifyd.Notification(...))
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Tuple

from . import (GUARD_SQL, NotInTransactionError, Notification, SendResult, _driver_in_transaction, _fn, _has_sqlstate,
               _map_error, _put_args, _send_args, _send_sql)

__all__ = ["send", "cancel", "subscribe", "unsubscribe", "put_recipient"]


async def _run(db: Any, sql: str, args: List[Any]) -> Tuple[Any, ...]:
    try:
        cur = await db.execute(sql, args)
        row: Tuple[Any, ...] = await cur.fetchone()
        return row
    except Exception as err:
        mapped = _map_error(err)
        if mapped is None:
            raise
        raise mapped from err


async def _check_transaction(db: Any, allow_autocommit: bool) -> None:
    if allow_autocommit:
        return
    inside = _driver_in_transaction(db)
    if inside is None:
        try:
            await db.execute(GUARD_SQL)
            inside = True
        except Exception as err:
            if not _has_sqlstate(err, "25P01"):
                raise
            inside = False
    if not inside:
        raise NotInTransactionError(
            "notifyd.aio.send: the connection is not in a transaction (autocommit), so the notification would "
            "commit on its own: use `async with conn.transaction():` (or pass allow_autocommit=True to send on "
            "its own)")


async def send(db: Any, n: "Notification[Any]", *, schema: Optional[str] = None,
               allow_autocommit: bool = False) -> SendResult:
    """notifyd.send, awaited."""
    await _check_transaction(db, allow_autocommit)
    row = await _run(db, _send_sql(schema), _send_args(n))
    return SendResult(id=row[0], duplicate=row[1])


async def cancel(db: Any, notifier: str, key: str, *, schema: Optional[str] = None) -> Optional[int]:
    """notifyd.cancel, awaited."""
    n: Optional[int] = (await _run(db, "SELECT " + _fn("notify_cancel", schema) + "(%s, %s)", [notifier, key]))[0]
    return n


async def subscribe(db: Any, topic: str, recipient: str, reason: str = "subscribed", *,
                    schema: Optional[str] = None) -> bool:
    """notifyd.subscribe, awaited."""
    return bool((await _run(db, "SELECT " + _fn("notify_subscribe", schema) + "(%s, %s, %s)",
                            [topic, recipient, reason]))[0])


async def unsubscribe(db: Any, topic: str, recipient: str, *, schema: Optional[str] = None) -> bool:
    """notifyd.unsubscribe, awaited."""
    return bool((await _run(db, "SELECT " + _fn("notify_unsubscribe", schema) + "(%s, %s)", [topic, recipient]))[0])


async def put_recipient(db: Any, recipient_id: str, profile: Mapping[str, Any], *,
                        schema: Optional[str] = None) -> None:
    """notifyd.put_recipient, awaited."""
    await _run(db, "SELECT 1 FROM " + _fn("notify_put_recipient", schema) + "(%s, %s::jsonb)",
               _put_args(recipient_id, profile))
