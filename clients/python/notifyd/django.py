"""notifyd for Django: the calls on a Django database connection (the
default one unless ``using`` names another), inside ``transaction.atomic``::

    from django.db import transaction
    import notifyd, notifyd.django

    with transaction.atomic():
        comment = Comment.objects.create(post=post, body=body)
        notifyd.django.send(notifyd.Notification(
            notifier="comment.created", key=f"comment-{comment.pk}",
            recipients=[str(post.author_id)], params={...}))

``send`` refuses to run outside an atomic block (NotInTransactionError) (in autocommit the
notification would commit on its own, even when the view then fails); with
``ATOMIC_REQUESTS`` every view is one. Errors are notifyd's InputError and
UnknownNotifierError, whatever the database driver (psycopg2 or psycopg 3).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from django.db import connections  # type: ignore[import]

import notifyd
from notifyd import NotInTransactionError, Notification, SendResult

__all__ = ["send", "cancel", "subscribe", "unsubscribe", "put_recipient"]


def _cursor(using: Optional[str]) -> Any:
    return connections[using or "default"].cursor()


def send(n: "Notification[Any]", *, using: Optional[str] = None, schema: Optional[str] = None) -> SendResult:
    """notifyd.send on Django's connection; raises NotInTransactionError
    outside transaction.atomic."""
    conn = connections[using or "default"]
    if not conn.in_atomic_block:
        raise NotInTransactionError(
            "notifyd.django.send: not inside transaction.atomic(): the notification would commit on its own "
            "whatever happens to the rest of the request; wrap the write and the send in transaction.atomic()"
        )
    with conn.cursor() as cur:
        return notifyd.send(cur, n, schema=schema)


def cancel(notifier: str, key: str, *, using: Optional[str] = None, schema: Optional[str] = None) -> Optional[int]:
    """notifyd.cancel on Django's connection."""
    with _cursor(using) as cur:
        return notifyd.cancel(cur, notifier, key, schema=schema)


def subscribe(topic: str, recipient: str, reason: str = "subscribed", *, using: Optional[str] = None,
              schema: Optional[str] = None) -> bool:
    """notifyd.subscribe on Django's connection."""
    with _cursor(using) as cur:
        return notifyd.subscribe(cur, topic, recipient, reason, schema=schema)


def unsubscribe(topic: str, recipient: str, *, using: Optional[str] = None, schema: Optional[str] = None) -> bool:
    """notifyd.unsubscribe on Django's connection."""
    with _cursor(using) as cur:
        return notifyd.unsubscribe(cur, topic, recipient, schema=schema)


def put_recipient(recipient_id: str, profile: Mapping[str, Any], *, using: Optional[str] = None,
                  schema: Optional[str] = None) -> None:
    """notifyd.put_recipient on Django's connection."""
    with _cursor(using) as cur:
        notifyd.put_recipient(cur, recipient_id, profile, schema=schema)
